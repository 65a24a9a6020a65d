package nccl_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nccl"
)

// allReduceOn starts an AllReduce of n f32 on every rank but skip, each
// with its own device buffer, and returns each rank's error (nil for skip)
// and how long it took.
func allReduceOn(t *testing.T, comms []comm.Communicator, dev *nccl.Device, skip int, ctx context.Context, n int) ([]error, []time.Duration) {
	t.Helper()
	errs := make([]error, len(comms))
	took := make([]time.Duration, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		if r == skip {
			continue
		}
		b, err := dev.Alloc(comm.F32, n)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Free(b) })
		wg.Go(func() {
			start := time.Now()
			errs[r] = c.AllReduce(ctx, b, b, comm.Sum)
			took[r] = time.Since(start)
		})
	}
	wg.Wait()
	return errs, took
}

// The deadline, abort and close cases (a rank that never joins, that
// aborts or closes while the others wait) are commtest's fault suite:
// TestSuitesFake and TestConformanceStaged run commtest.RunFaults.

// TestHostBufferRejected: a host buffer is an *comm.ArgError that says
// what to use, on the rank that passed it, and comm.ErrPeerAbandoned on
// the others, with that rank's own reason (docs/errors.md); the
// communicator stays usable.
func TestHostBufferRejected(t *testing.T) {
	comms, dev := fakeWorld(t, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			var b comm.Buffer
			if r == 0 {
				b = comm.Host(make([]float32, 16))
			} else {
				b, _ = dev.Alloc(comm.F32, 16)
				defer dev.Free(b)
			}
			errs[r] = c.AllReduce(context.Background(), b, b, comm.Sum)
		})
	}
	wg.Wait()
	var ae *comm.ArgError
	if !errors.As(errs[0], &ae) || ae.Arg != "send" {
		t.Errorf("rank 0: %v, want an *comm.ArgError on send", errs[0])
	}
	if !errors.Is(errs[1], comm.ErrPeerAbandoned) {
		t.Errorf("rank 1: %v, want comm.ErrPeerAbandoned", errs[1])
	}
	t.Logf("rank 1: %v", errs[1])
	if ae != nil && !strings.Contains(errs[1].Error(), cutFor(ae.Error())) {
		t.Errorf("rank 1: %q does not give rank 0's reason (%q)", errs[1], ae)
	}
	errs2, _ := allReduceOn(t, comms, dev, -1, context.Background(), 16)
	for r, err := range errs2 {
		if err != nil {
			t.Errorf("rank %d, the AllReduce after: %v", r, err)
		}
	}
}

// cutFor is what of reason a control record carries (its first 224 bytes).
func cutFor(reason string) string { return reason[:min(len(reason), 224)] }
