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
