package shm

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// ErrStalled is comm.ErrStalled: this rank's own process was stalled
// longer than its node-mates' FailureTimeout. They gave it up when its
// heartbeat stopped, so the abort records it then reads blame it, and the
// error names this rank, not the node-mate whose record it read (which is
// alive): a *comm.StalledError, in the words of every tier.
var ErrStalled = comm.ErrStalled

// stallWatch is this process's own liveness, as the heartbeat goroutine
// sees it: when it last ran, and its last stalls, gaps between two of its
// ticks longer than limit (the process did not run in between; the clock
// is monotonic, which advances while the process is stopped). A
// node-mate's abort record that blames this rank is stamped with the
// host's wall clock when it was written (aTime): a stall that covers that
// moment is why the node-mate gave this rank up (explains).
type stallWatch struct {
	limit time.Duration

	mu    sync.Mutex // guards the fields below
	last  time.Time  // the heartbeat goroutine's last tick
	stall [4]span    // the last stalls, the newest at (n-1) % len
	n     int        // stalls seen
}

// span is a stall: the ticks before and after it.
type span struct{ from, to time.Time }

// newStallWatch watches for stalls longer than half of failureTimeout: a
// node-mate gives this rank up when its heartbeat has not moved for
// failureTimeout, which it bumps every fifth of it (heartbeatEvery), so
// no stall that makes it do so is shorter.
func newStallWatch(failureTimeout time.Duration, now time.Time) *stallWatch {
	return &stallWatch{limit: failureTimeout / 2, last: now}
}

// note records that the heartbeat goroutine ran at now.
func (s *stallWatch) note(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.last) > s.limit {
		s.stall[s.n%len(s.stall)] = span{from: s.last, to: now}
		s.n++
	}
	s.last = now
}

// explains returns how long the stall lasted that explains a node-mate
// giving this rank up at at (its abort record's stamp, Unix nanoseconds),
// asked at now: a stall that began before at and ended at most slack
// before it (the node-mate may look again before the heartbeat, moving
// again, reaches it), or the one still going on (the heartbeat goroutine
// has not run since). A nil watch (a communicator a test assembled)
// explains nothing, nor does a record without a stamp.
func (s *stallWatch) explains(at int64, now time.Time, slack time.Duration) (time.Duration, bool) {
	if s == nil || at <= 0 {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	spans := append([]span(nil), s.stall[:min(s.n, len(s.stall))]...)
	if now.Sub(s.last) > s.limit {
		spans = append(spans, span{from: s.last, to: now})
	}
	for _, g := range spans {
		if g.from.UnixNano() <= at && at <= g.to.Add(slack).UnixNano() {
			return g.to.Sub(g.from), true
		}
	}
	return 0, false
}

// expelled is this rank's error when node-mate q's abort record, written
// at at, blames this rank for how (its heartbeat stopped): its node-mates
// gave it up. If this process was stalled then, the failure is its own
// stall (ErrStalled), said as nexar says it; else it is q's report, which
// names this rank.
func (c *Comm) expelled(q int, how string, at int64) error {
	if gap, ok := c.stalls.explains(at, time.Now(), c.cfg.FailureTimeout); ok {
		return &comm.PeerError{Peer: c.rank, Addr: "this rank", Err: &comm.StalledError{Gap: gap, Timeout: c.cfg.FailureTimeout,
			What: c.rankName(q) + " reports that it gave this rank up", Cause: errors.New(how)}}
	}
	return tier.FailPeer.Blamed(q, comm.Blame{Rank: c.rank, How: "its peers gave this rank up: " + how}, how)
}

// rankName names rank q in a message: by its job rank first where
// Config.Ranks says it (a composed communicator's errors quote the
// message as it is).
func (c *Comm) rankName(q int) string {
	if c.cfg.Ranks == nil {
		return fmt.Sprintf("rank %d", q)
	}
	return fmt.Sprintf("rank %d (local rank %d)", c.cfg.Ranks[q], q)
}
