//go:build linux

package shm

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// A composed communicator aborts this one with a cause that blames a rank
// of its own (the hierarchy's global rank 42, not a rank here): the
// peers read that rank from the abort record, marked as the composer's,
// never as a rank of this communicator; a failure this communicator saw
// itself blames its own rank.
func TestAbortRecordKeepsTheCulprit(t *testing.T) {
	cs := localWorld(t, 3, Config{Timeout: time.Minute})
	cause := &comm.PeerError{Peer: 42, Addr: "node 9, local 1", Err: errors.New("its process is gone")}
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		if r == 0 {
			time.Sleep(20 * time.Millisecond)
			c.Abort(cause)
			return nil
		}
		err := c.Barrier(context.Background())
		b, ok := comm.CulpritOf(err)
		if !errors.Is(err, comm.ErrPeerFailed) || !ok || b.Rank != 42 || !b.Outside || b.How != "its process is gone" {
			return fmt.Errorf("%v: blames %+v, %v; want rank 42 of the composer", err, b, ok)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}

	cs = localWorld(t, 3, Config{Timeout: time.Minute})
	errs = onEveryRank(cs, func(r int, c *Comm) error {
		if r == 2 {
			time.Sleep(20 * time.Millisecond)
			return c.Close()
		}
		err := c.Barrier(context.Background())
		var oe *comm.OpError
		if !errors.As(err, &oe) {
			return fmt.Errorf("%v: not an *comm.OpError", err)
		}
		if got, ok := oe.Culprit(); !ok || got != 2 {
			return fmt.Errorf("%v: Culprit() = %d, %v; want 2", err, got, ok)
		}
		if b, _ := comm.CulpritOf(err); b.Outside {
			return fmt.Errorf("%v: blames a rank outside", err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// An outside failure detector's news (comm.Control's PeerFailed, rank in
// the job's numbering, Config.Ranks) aborts the communicator with an
// error naming the rank; the peers read it from the abort record. Reports
// of this rank, of a rank not among the communicator's, and repeated ones
// change nothing.
func TestPeerFailedAborts(t *testing.T) {
	cs := localWorld(t, 3, Config{Ranks: []int{10, 11, 12}})
	gone := errors.New("the membership lost it")
	cs[0].PeerFailed(10, gone) // itself
	cs[0].PeerFailed(3, gone)  // not a job rank of this communicator
	select {
	case <-cs[0].Aborted():
		t.Fatalf("reports of itself and of a stranger aborted the communicator: %v", cs[0].AbortCause())
	default:
	}
	cs[0].PeerFailed(12, gone)
	cs[0].PeerFailed(11, errors.New("a second report"))
	select {
	case <-cs[0].Aborted():
	case <-time.After(5 * time.Second):
		t.Fatal("PeerFailed did not abort the communicator")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := cs[0].Barrier(ctx)
	if !errors.Is(err, comm.ErrAborted) || !errors.Is(err, comm.ErrPeerFailed) || !errors.Is(err, gone) || comm.PeerOf(err) != 2 {
		t.Errorf("rank 0's Barrier after PeerFailed(job rank 12) got %v; want ErrAborted and ErrPeerFailed naming rank 2, with the detector's cause", err)
	}
	// The others read rank 0's abort record in their next call.
	errs := make(chan error, 2)
	for _, c := range cs[1:] {
		go func() { errs <- c.Barrier(ctx) }()
	}
	for range 2 {
		if err := <-errs; err == nil {
			t.Errorf("a peer's Barrier with rank 0 aborted returned nil")
		}
	}
}
