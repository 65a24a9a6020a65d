//go:build linux

package shm

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// onEveryRank runs f on every rank at once and returns each rank's error.
func onEveryRank(cs []*Comm, f func(r int, c *Comm) error) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() { errs[r] = f(r, c) })
	}
	wg.Wait()
	return errs
}

// allReduceWorks checks that a communicator is still usable.
func allReduceWorks(t *testing.T, cs []*Comm) {
	t.Helper()
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		x := []int32{int32(r), 1}
		if err := c.AllReduce(context.Background(), comm.Host(x), comm.Host(x), comm.Sum); err != nil {
			return err
		}
		if want := int32(len(cs) * (len(cs) - 1) / 2); x[0] != want || x[1] != int32(len(cs)) {
			t.Errorf("rank %d: AllReduce gave %v, want [%d %d]", r, x, want, len(cs))
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("communicator no longer works: %v", err)
	}
}

// failsFast checks that a call on c fails at once with an error that wraps
// every one of want.
func failsFast(t *testing.T, c *Comm, want ...error) {
	t.Helper()
	start := time.Now()
	err := c.Barrier(context.Background())
	for _, w := range want {
		if !errors.Is(err, w) {
			t.Errorf("rank %d: later call: %v; want it to wrap %v", c.rank, err, w)
		}
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("rank %d: a call on a spent communicator took %v", c.rank, d)
	}
}

func opErrorOf(t *testing.T, err error) *comm.OpError {
	t.Helper()
	var oe *comm.OpError
	if !errors.As(err, &oe) {
		t.Fatalf("%v is not a *comm.OpError", err)
	}
	return oe
}

// A rank that dies in the middle of a collective (the kill hook: no more
// posts, no more heartbeats, its pid alive since it is this process) is
// reported by every survivor, naming it, within FailureTimeout; their
// communicators are aborted and later calls fail fast.
func TestKilledRankInProcess(t *testing.T) {
	const failure = 500 * time.Millisecond
	cs := localWorld(t, 4, Config{SlotBytes: minSlotBytes, FailureTimeout: failure})
	ended := make([]time.Time, 4) // ended[1]: when rank 1 was killed
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		x := make([]float32, 1<<20) // over a thousand steps through the small slots
		w := c.Start(context.Background(), comm.Call{Kind: comm.KindAllReduce, Send: comm.Host(x), Recv: comm.Host(x), Op: comm.Sum})
		if r == 1 {
			for atomic.LoadUint64(c.mine.posted) < 5 { // a few steps in
				runtime.Gosched()
			}
			ended[r] = time.Now()
			c.kill()
			return w.Wait()
		}
		err := w.Wait()
		ended[r] = time.Now()
		return err
	})
	if !errors.Is(errs[1], errKilled) {
		t.Errorf("the killed rank: %v", errs[1])
	}
	for _, r := range []int{0, 2, 3} {
		var pe *comm.PeerError
		if !errors.As(errs[r], &pe) || pe.Peer != 1 || !errors.Is(errs[r], comm.ErrPeerFailed) {
			t.Errorf("rank %d: got %v, want a *comm.PeerError naming rank 1", r, errs[r])
			continue
		}
		if opErrorOf(t, errs[r]).Peer != 1 || !strings.Contains(errs[r].Error(), "rank 1") {
			t.Errorf("rank %d: %v does not name rank 1", r, errs[r])
		}
		if took := ended[r].Sub(ended[1]); took > failure+time.Second {
			t.Errorf("rank %d: noticed after %v; FailureTimeout is %v", r, took, failure)
		}
		failsFast(t, cs[r], comm.ErrAborted, comm.ErrPeerFailed)
	}
	t.Logf("rank 0: %v", errs[0])
}

// A peer whose process is gone is seen by its pid, long before its
// heartbeat would time out.
func TestDeadProcessIsSeenByItsPid(t *testing.T) {
	cs := localWorld(t, 3, Config{SlotBytes: minSlotBytes, FailureTimeout: time.Minute})
	gone := deadPid(t)
	cs[2].kill()
	writeProc(cs[2].seg.mem, cs[2].seg.l.ctl(2)+cProc, gone) // as if rank 2 were that process
	start := time.Now()
	errs := onEveryRank(cs[:2], func(r int, c *Comm) error { return c.Barrier(context.Background()) })
	for r, err := range errs {
		var pe *comm.PeerError
		if !errors.As(err, &pe) || pe.Peer != 2 || !strings.Contains(err.Error(), "is gone") {
			t.Errorf("rank %d: got %v, want a *comm.PeerError: rank 2's process is gone", r, err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a dead process took %v to notice", d)
	}
}

// Close ends this rank's operations in flight with ErrClosed; the peers
// fail the collectives that need the closed rank with a *comm.PeerError,
// at once; Close is idempotent and later calls fail fast.
func TestCloseMidCollective(t *testing.T) {
	cs := localWorld(t, 3, Config{SlotBytes: minSlotBytes})
	ctx := context.Background()
	var works []*comm.Work
	for range 3 { // one executing (its header posted), two queued
		works = append(works, cs[0].Start(ctx, comm.Call{Kind: comm.KindBarrier}))
	}
	time.Sleep(30 * time.Millisecond)
	start := time.Now()
	if err := cs[0].Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	for i, w := range works {
		if err := w.Wait(); !errors.Is(err, comm.ErrClosed) {
			t.Errorf("operation %d in flight at Close: %v, want ErrClosed", i, err)
		}
	}
	if err := cs[0].Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	failsFast(t, cs[0], comm.ErrClosed)
	if err := cs[0].Send(ctx, comm.Host([]float32{1}), 1, 0); !errors.Is(err, comm.ErrClosed) {
		t.Errorf("Send after Close: %v", err)
	}
	// Barrier #1 needs nothing more of rank 0, which posted its header
	// before it closed; Barrier #2 needs rank 0.
	errs := onEveryRank(cs[1:], func(r int, c *Comm) error {
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		start := time.Now()
		err := c.Barrier(ctx)
		var pe *comm.PeerError
		if !errors.As(err, &pe) || pe.Peer != 0 || !strings.Contains(err.Error(), "closed") {
			t.Errorf("a peer of the closed rank: %v, want a *comm.PeerError: rank 0 closed", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("the peer took %v to notice", d)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Error(err)
	}
}

// Point-to-point failures: a Recv whose context ends loses nothing, even
// with its message part way in (a later Recv gets it whole); a Send
// cancelled part way is dropped by the receiver, whose Recv gets the next
// message instead of a mismatch; a Recv of the wrong size is a mismatch on
// the receiver only; a peer that closes ends the Recvs waiting for it.
func TestPointToPointFaults(t *testing.T) {
	cs := localWorld(t, 2, Config{SlotBytes: minSlotBytes})
	ctx := context.Background()
	big := make([]int64, 1<<16) // far beyond the 4 KiB ring
	for i := range big {
		big[i] = int64(i)
	}
	check := func(what string, got []int64) {
		t.Helper()
		for i, v := range got {
			if v != int64(i) {
				t.Fatalf("%s: element %d is %d", what, i, v)
			}
		}
	}

	// A Recv that times out with no message, then a message.
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	if err := cs[1].Recv(short, comm.Host(make([]int64, 1)), 0, 1); !errors.Is(err, comm.ErrTimeout) {
		t.Fatalf("Recv past its deadline: %v", err)
	}
	w := cs[0].Start(ctx, comm.Call{Kind: comm.KindSend, Send: comm.Host(big), Peer: 1, Tag: 1})
	in := make([]int64, len(big))
	if err := errors.Join(cs[1].Recv(ctx, comm.Host(in), 0, 1), w.Wait()); err != nil {
		t.Fatal(err)
	}
	check("the message after a timed-out Recv", in)

	// A Recv cancelled with its message part way in: rank 0's engine is held
	// after it filled the ring once.
	w = cs[0].Start(ctx, comm.Call{Kind: comm.KindSend, Send: comm.Host(big), Peer: 1, Tag: 5})
	time.Sleep(20 * time.Millisecond)
	cs[0].p2p.mu.Lock()
	rctx, rcancel := context.WithCancel(ctx)
	clear(in)
	r := cs[1].Start(rctx, comm.Call{Kind: comm.KindRecv, Recv: comm.Host(in), Peer: 0, Tag: 5})
	time.Sleep(20 * time.Millisecond)
	rcancel()
	if err := r.Wait(); !errors.Is(err, comm.ErrCanceled) {
		t.Errorf("a cancelled Recv: %v", err)
	}
	cs[0].p2p.mu.Unlock()
	again := make([]int64, len(big))
	if err := errors.Join(cs[1].Recv(ctx, comm.Host(again), 0, 5), w.Wait()); err != nil {
		t.Fatal(err)
	}
	check("the message of a Recv cancelled part way", again)

	// A Send cancelled part way: nobody receives tag 2 yet, so the ring
	// fills and the Send's context ends with part of it sent.
	sctx, scancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer scancel()
	if err := cs[0].Send(sctx, comm.Host(big), 1, 2); !errors.Is(err, comm.ErrTimeout) {
		t.Fatalf("Send past its deadline: %v", err)
	}
	small := []int64{42, 43}
	w = cs[0].Start(ctx, comm.Call{Kind: comm.KindSend, Send: comm.Host(small), Peer: 1, Tag: 2})
	got := make([]int64, 2)
	if err := cs[1].Recv(ctx, comm.Host(got), 0, 2); err != nil || got[0] != 42 || got[1] != 43 {
		t.Errorf("the message after a cancelled Send: %v %v", err, got)
	}
	if err := w.Wait(); err != nil {
		t.Error(err)
	}

	// A Recv of the wrong length.
	w = cs[0].Start(ctx, comm.Call{Kind: comm.KindSend, Send: comm.Host(small), Peer: 1, Tag: 3})
	var me *comm.MismatchError
	if err := cs[1].Recv(ctx, comm.Host(make([]int64, 3)), 0, 3); !errors.As(err, &me) {
		t.Errorf("Recv of 3 elements for a message of 2: %v, want a *comm.MismatchError", err)
	}
	if err := w.Wait(); err != nil {
		t.Errorf("the Send of the refused message: %v", err)
	}
	allReduceWorks(t, cs)

	// The peer closes while a Recv waits for it.
	w = cs[1].Start(ctx, comm.Call{Kind: comm.KindRecv, Recv: comm.Host(got), Peer: 0, Tag: 4})
	time.Sleep(20 * time.Millisecond)
	cs[0].Close()
	var pe *comm.PeerError
	if err := w.Wait(); !errors.As(err, &pe) || pe.Peer != 0 {
		t.Errorf("Recv from a peer that closed: %v", err)
	}
}
