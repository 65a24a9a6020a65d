//go:build linux

package shm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// The stall watch is handed the time: a gap between the heartbeat's ticks
// longer than half the failure timeout is a stall, which explains an abort
// record stamped while it lasted or within the slack after it, and so
// does a stall still going on.
func TestStallWatch(t *testing.T) {
	const ft = 4 * time.Second
	t0 := time.Now()
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	s := newStallWatch(ft, t0)
	for i := 1; i <= 20; i++ {
		s.note(t0.Add(time.Duration(i) * 100 * time.Millisecond))
	}
	if gap, ok := s.explains(at(time.Second), t0.Add(2*time.Second), ft); ok {
		t.Fatalf("a process that ticked every 100ms explains a record: stalled %v", gap)
	}
	// Stopped from 2s to 12s; the node-mate gave it up at 6s.
	if gap, ok := s.explains(at(6*time.Second), t0.Add(12*time.Second), ft); !ok || gap != 10*time.Second {
		t.Fatalf("on resuming, before the next tick: explains = %v, %v; want 10s", gap, ok)
	}
	now := t0.Add(time.Minute) // read much later, ticking all along: the stamp decides
	for d := 12 * time.Second; d <= time.Minute; d += 100 * time.Millisecond {
		s.note(t0.Add(d))
	}
	for _, tc := range []struct {
		at   time.Duration
		want bool
	}{
		{time.Second, false},        // before the stall
		{6 * time.Second, true},     // during it
		{15 * time.Second, true},    // within the slack after it
		{17 * time.Second, false},   // past the slack
		{-time.Hour, false},         // long before
		{12*time.Second + ft, true}, // at the slack's end
	} {
		if _, got := s.explains(at(tc.at), now, ft); got != tc.want {
			t.Errorf("a record stamped at %v: explains = %v, want %v", tc.at, got, tc.want)
		}
	}
	if _, ok := s.explains(0, now, ft); ok {
		t.Error("a record without a stamp is explained")
	}
	if _, ok := (*stallWatch)(nil).explains(at(6*time.Second), now, ft); ok {
		t.Error("a nil watch explains a record")
	}
}

// A node-mate's abort record that blames this rank: with a stall of this
// process at the time of the record, the rank reports its own stall
// (ErrStalled, a *comm.PeerError naming itself, in nexar's words); without
// one, the node-mate's report, which still names this rank, not the
// node-mate. A part of a composed communicator (Config.Ranks) does the
// same when the composer's abort of the node-mate blames this process by
// its job rank.
func TestExpelledRankBlamesItself(t *testing.T) {
	for _, tc := range []struct {
		stalled, composed bool
	}{{true, false}, {false, false}, {true, true}, {false, true}} {
		cfg := Config{Timeout: time.Minute}
		cause := &comm.PeerError{Peer: 2, Err: errors.New("its heartbeat stopped 1.02s ago (FailureTimeout 1s): the process is hung or gone")}
		reporter := "rank 0"
		if tc.composed {
			cfg.Ranks = []int{4, 5, 6}
			cause.Peer = 6
			reporter = "rank 4 (local rank 0)"
		}
		cs := localWorld(t, 3, cfg)
		if tc.stalled {
			// As if rank 2's heartbeat goroutine had not run for 2.99 s,
			// until just now.
			now, w := time.Now(), cs[2].stalls
			w.mu.Lock()
			w.stall[w.n%len(w.stall)] = span{from: now.Add(-3 * time.Second), to: now.Add(-10 * time.Millisecond)}
			w.n++
			w.mu.Unlock()
		}
		errs := onEveryRank(cs, func(r int, c *Comm) error {
			if r != 0 {
				return c.Barrier(context.Background())
			}
			if tc.composed {
				c.Abort(cause) // the composer's: its rank 6
				return nil
			}
			c.users.Add(1) // as the liveness check of a wait does
			c.abort(cause)
			c.users.Done()
			return nil
		})
		err := errs[2]
		b, ok := comm.CulpritOf(err)
		if !ok || b.Rank != 2 || b.Outside || !errors.Is(err, comm.ErrPeerFailed) {
			t.Errorf("%+v: rank 2's error blames %+v, %v: %v; want rank 2 itself", tc, b, ok, err)
		}
		var pe *comm.PeerError
		if got := errors.Is(err, ErrStalled); got != tc.stalled || tc.stalled && (!errors.As(err, &pe) || pe.Peer != 2) {
			t.Errorf("%+v: rank 2: errors.Is(ErrStalled) = %v: %v", tc, got, err)
		}
		want := "rank 2 failed: its peers gave this rank up: its heartbeat stopped"
		if tc.stalled {
			want = "rank 2 (this rank) failed: this process was stalled for 2.99s (stopped, e.g. SIGSTOP, frozen or starved of CPU), longer than FailureTimeout (5s), " +
				"and its peers have expelled it: " + reporter + " reports that it gave this rank up (its heartbeat stopped 1.02s ago (FailureTimeout 1s): the process is hung or gone); "
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: rank 2: %v; want it to say %q", tc, err, want)
		}
		t.Logf("%+v: rank 2: %v", tc, err)
		if b, ok := comm.CulpritOf(errs[1]); !ok || b.Rank != cause.Peer || b.Outside != tc.composed {
			t.Errorf("%+v: rank 1: %v blames %+v; want rank %d", tc, errs[1], b, cause.Peer)
		}
	}
}
