package comm_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar"
)

// tally is a Decorator that counts the operations it starts, those of
// the communicators derived from its own included (one count per world).
type tally struct{ n *atomic.Int64 }

func (d tally) Start(ctx context.Context, call comm.Call, c comm.Communicator) *comm.Work {
	d.n.Add(1)
	return c.Start(ctx, call)
}

func (d tally) Derive(comm.Communicator) comm.Decorator { return d }

// A decorator made with Wrap keeps every capability of the communicator it
// wraps: every call goes through its Start (the blocking forms too), the
// communicators Split and Shrink return are decorated again, the census
// and an outside detector's news reach the wrapped communicator, and an
// Abort of the wrapper aborts it and closes the wrapper's Aborted.
func TestWrapKeepsControl(t *testing.T) {
	const n = 3
	inner, err := nexar.NewMemoryWorld(n, nexar.Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var count atomic.Int64
	cs := make([]comm.Communicator, n)
	for r := range cs {
		cs[r] = comm.Wrap(inner[r], tally{&count})
		if comm.Unwrap(cs[r]) != comm.Communicator(inner[r]) {
			t.Fatalf("Unwrap(Wrap(c)) is not c")
		}
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	each := func(what string, f func(r int, c comm.Communicator) error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r, c := range cs {
			wg.Go(func() { errs[r] = f(r, c) })
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("%s: rank %d: %v", what, r, err)
			}
		}
	}

	each("AllReduce", func(r int, c comm.Communicator) error {
		x := []float32{float32(r + 1)}
		if err := c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); err != nil {
			return err
		}
		if x[0] != 6 {
			return errors.New("wrong sum")
		}
		return nil
	})
	if got := count.Load(); got != n {
		t.Fatalf("the blocking AllReduce went through the decorator %d times, want %d", got, n)
	}

	// Split and Shrink (nobody failed: a copy) come back decorated.
	children := make([]comm.Communicator, n)
	each("Split", func(r int, c comm.Communicator) error {
		var err error
		children[r], err = c.Split(ctx, 0, -r)
		return err
	})
	shrunk := make([]comm.Communicator, n)
	each("Shrink", func(r int, c comm.Communicator) error {
		var err error
		shrunk[r], err = c.Shrink(ctx)
		return err
	})
	for _, made := range [][]comm.Communicator{children, shrunk} {
		before := count.Load()
		each("Barrier on a made communicator", func(r int, _ comm.Communicator) error { return made[r].Barrier(ctx) })
		if got := count.Load() - before; got != n {
			t.Errorf("a Barrier on a communicator made by Split or Shrink went through the decorator %d times, want %d", got, n)
		}
		if comm.Unwrap(made[0]) == made[0] {
			t.Errorf("%T made from a wrapper is not wrapped", made[0])
		}
		for _, c := range made {
			c.Close()
		}
	}

	// The census, through the wrappers.
	for r, c := range cs {
		if _, ok := c.SetProgress(func() comm.Progress { return comm.Progress{Started: uint64(10 + r)} }); !ok {
			t.Fatalf("rank %d: SetProgress through the wrapper installed nothing", r)
		}
	}
	answers, answered := cs[0].Progress(ctx)
	for r := range n {
		if !answered[r] || answers[r].Started != uint64(10+r) {
			t.Errorf("the census through the wrapper: rank %d answered %v with %+v, want Started %d", r, answered[r], answers[r], 10+r)
		}
	}

	// Abort through the wrapper reaches the wrapped communicator and every
	// peer; the wrapper's Aborted is the wrapped one's.
	cause := errors.New("the operator's abort")
	cs[1].Abort(cause)
	for r, c := range cs {
		select {
		case <-c.Aborted():
		case <-time.After(10 * time.Second):
			t.Fatalf("rank %d: the wrapper's Aborted did not close within 10s of rank 1's Abort", r)
		}
		if got := c.AbortCause(); !errors.Is(got, cause) && r == 1 {
			t.Errorf("rank 1: AbortCause %v, want the abort's cause", got)
		}
		if err := c.Barrier(ctx); !errors.Is(err, comm.ErrAborted) {
			t.Errorf("rank %d: a Barrier after the abort got %v, want comm.ErrAborted", r, err)
		}
	}
}

// An outside detector's news reaches the wrapped communicator.
func TestWrapPassesPeerFailed(t *testing.T) {
	inner, err := nexar.NewMemoryWorld(2, nexar.Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var count atomic.Int64
	c := comm.Wrap(inner[0], tally{&count})
	defer c.Close()
	defer inner[1].Close()
	c.PeerFailed(1, errors.New("the membership lost it"))
	select {
	case <-inner[0].Aborted():
	case <-time.After(10 * time.Second):
		t.Fatal("PeerFailed through the wrapper did not abort the wrapped communicator")
	}
	if err := c.Barrier(context.Background()); !errors.Is(err, comm.ErrPeerFailed) || comm.PeerOf(err) != 1 {
		t.Errorf("a Barrier after PeerFailed(1) got %v, want an error naming rank 1 as failed", err)
	}
}
