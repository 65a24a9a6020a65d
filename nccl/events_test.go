package nccl_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nccl/ncclfake"
	"github.com/hiercomm/hiercomm/nexar"
)

// TestEventsReused: a collective's completion event is reused by the next
// one instead of created per collective, and Close leaves none alive.
func TestEventsReused(t *testing.T) {
	const n, calls = 2, 200
	comms, dev := fakeWorld(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bufs := deviceBufs(t, dev, n, 1024)
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

// TestAbortAfterTheEventKeepsTheResult: a collective whose event had
// completed when its communicator was aborted, before the completer saw
// it, succeeds with its result: a peer that aborts once its part is done,
// as a Broadcast's receiver that has it all may, does not fail the others'
// collective. (One whose event had not completed fails with the abort:
// the fault suites.)
func TestAbortAfterTheEventKeepsTheResult(t *testing.T) {
	const n = 2
	lib := ncclfake.New(ncclfake.Options{})
	hold := nccl.HoldEvents(lib)
	controls, err := nexar.NewMemoryWorld(n, nexar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	comms, dev := fakeWorldOn(t, lib, asComms(controls), nccl.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bufs := deviceBufs(t, dev, n, 3)
	for r, b := range bufs {
		if err := dev.Write(b, f32Bytes([]float32{float32(r + 1), float32(10 * (r + 1)), -float32(r)})); err != nil {
			t.Fatal(err)
		}
	}
	c0 := comms[0].(*nccl.Comm)
	hold(c0, true)
	done := make([]chan error, n)
	for r := range n {
		done[r] = make(chan error, 1)
		go func() { done[r] <- comms[r].AllReduce(ctx, bufs[r], bufs[r], comm.Sum) }()
	}
	if err := <-done[1]; err != nil { // the collective ended on the device
		t.Fatal(err)
	}
	hold(c0, false)
	c0.Abort(errors.New("the test aborts rank 0 after the AllReduce ended"))
	if err := <-done[0]; err != nil {
		t.Fatalf("rank 0's AllReduce, ended on the device before the abort: %v", err)
	}
	got := make([]byte, 12)
	if err := dev.Read(got, bufs[0]); err != nil {
		t.Fatal(err)
	}
	if want := f32Bytes([]float32{3, 30, -1}); !bytes.Equal(got, want) {
		t.Errorf("rank 0's result %v, want %v", got, want)
	}

}

// deviceBufs allocates n buffers of count float32s on dev, freed when the
// test ends.
func deviceBufs(t testing.TB, dev *nccl.Device, n, count int) []comm.Buffer {
	t.Helper()
	bufs := make([]comm.Buffer, n)
	for r := range bufs {
		b, err := dev.Alloc(comm.F32, count)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Free(b) })
		bufs[r] = b
	}
	return bufs
}
