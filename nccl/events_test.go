package nccl_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nccl/ncclfake"
)

// TestEventsReused: a collective's completion event is reused by the next
// one instead of created per collective, and Close leaves none alive.
func TestEventsReused(t *testing.T) {
	const n, calls = 2, 200
	comms, dev := fakeWorld(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bufs := make([]comm.Buffer, n)
	for r := range n {
		b, err := dev.Alloc(comm.F32, 1024)
		if err != nil {
			t.Fatal(err)
		}
		bufs[r] = b
		defer dev.Free(b)
	}
	_, before := ncclfake.Events(nccl.LibraryOf(dev))
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range n {
		wg.Go(func() {
			for range calls {
				if errs[r] = comms[r].AllReduce(ctx, bufs[r], bufs[r], comm.Sum); errs[r] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	_, after := ncclfake.Events(nccl.LibraryOf(dev))
	// Blocking calls: one event in flight per rank at a time.
	if created := after - before; created > 2*n {
		t.Errorf("%d blocking AllReduces on %d ranks created %d events, want at most %d (reused)", calls, n, created, 2*n)
	}
	for _, c := range comms {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if live, _ := ncclfake.Events(nccl.LibraryOf(dev)); live != 0 {
		t.Errorf("%d events alive after every communicator closed", live)
	}
}
