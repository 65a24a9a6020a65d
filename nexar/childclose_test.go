package nexar

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// A rank that closes a Split child while its peers are inside a
// collective on it: the peers' transport stays up (the parent uses it),
// so only the child's close notice can tell them. They must fail within
// moments, with no deadline of their own, and the parent stays usable.
func TestChildCloseIsToldToPeers(t *testing.T) {
	cs := memWorld(t, 4, Options{Timeout: time.Minute})
	children := make([]comm.Communicator, len(cs))
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		var err error
		children[r], err = c.Split(context.Background(), 0, r)
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: Split: %v", r, err)
		}
	}
	// Warm the child up, so its peers have frames from the closer
	// already (the count in the notice is not zero).
	onEveryRank(cs, func(r int, _ *Comm) error {
		x := []float32{float32(r)}
		return children[r].AllReduce(context.Background(), comm.Host(x), comm.Host(x), comm.Sum)
	})
	start := time.Now()
	took := make([]time.Duration, len(cs))
	errs = onEveryRank(cs, func(r int, c *Comm) error {
		if r == 3 {
			time.Sleep(100 * time.Millisecond)
			return children[r].Close()
		}
		x := make([]float32, 1<<16)
		err := children[r].AllReduce(context.Background(), comm.Host(x), comm.Host(x), comm.Sum)
		took[r] = time.Since(start)
		return err
	})
	for r, err := range errs[:3] {
		if !errors.Is(err, comm.ErrPeerFailed) {
			t.Errorf("rank %d: got %v, want a peer failure (ErrPeerFailed)", r, err)
		}
		if took[r] > 10*time.Second {
			t.Errorf("rank %d: told after %v", r, took[r])
		}
	}
	t.Logf("peers told after %v", took[:3])
	// The parent is unharmed: a clean close of a child aborts nothing.
	errs = onEveryRank(cs, func(r int, c *Comm) error { return c.Barrier(context.Background()) })
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: the parent's Barrier after the child's close: %v", r, err)
		}
	}
	for _, c := range children[:3] {
		c.Close()
	}
}
