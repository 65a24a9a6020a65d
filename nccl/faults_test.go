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

// TestDeadlineEndsEveryRank: rank 2 never joins the AllReduce; the others'
// deadline ends it with comm.ErrTimeout, and rank 2's next call fails fast
// (the communicator was aborted, and its peers told it).
func TestDeadlineEndsEveryRank(t *testing.T) {
	comms, dev := fakeWorld(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	errs, took := allReduceOn(t, comms, dev, 2, ctx, 1000)
	for r := range 2 {
		if !errors.Is(errs[r], comm.ErrTimeout) {
			t.Errorf("rank %d: %v, want comm.ErrTimeout", r, errs[r])
		}
		if took[r] > 5*time.Second {
			t.Errorf("rank %d took %v to give up", r, took[r])
		}
	}
	late, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	start := time.Now()
	b, _ := dev.Alloc(comm.F32, 1000)
	defer dev.Free(b)
	err := comms[2].AllReduce(late, b, b, comm.Sum)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("rank 2 after its peers timed out: %v after %v, want an error at once", err, time.Since(start))
	}
}

// TestAbortMidCollective: rank 1 aborts while the others are inside an
// AllReduce it will never make; every other rank ends with an error in
// bounded time, with no deadline of its own, and later calls fail fast
// with comm.ErrAborted.
func TestAbortMidCollective(t *testing.T) {
	comms, dev := fakeWorld(t, 4)
	cause := errors.New("operator pulled the plug")
	go func() {
		time.Sleep(200 * time.Millisecond)
		comms[1].(comm.Aborter).Abort(cause)
	}()
	errs, took := allReduceOn(t, comms, dev, 1, context.Background(), 1<<16)
	for r, err := range errs {
		if r == 1 {
			continue
		}
		if err == nil {
			t.Errorf("rank %d: AllReduce succeeded without rank 1", r)
		}
		if took[r] > 10*time.Second {
			t.Errorf("rank %d took %v to learn of the abort", r, took[r])
		}
		t.Logf("rank %d after %v: %v", r, took[r].Round(time.Millisecond), err)
	}
	b, _ := dev.Alloc(comm.F32, 8)
	defer dev.Free(b)
	for r, c := range comms {
		if err := c.AllReduce(context.Background(), b, b, comm.Sum); !errors.Is(err, comm.ErrAborted) {
			t.Errorf("rank %d after the abort: %v, want comm.ErrAborted", r, err)
		}
	}
}

// TestCloseMidCollective: rank 3 closes while the others wait for it in an
// AllReduce; they end with an error in bounded time.
func TestCloseMidCollective(t *testing.T) {
	comms, dev := fakeWorld(t, 4)
	go func() {
		time.Sleep(200 * time.Millisecond)
		comms[3].Close()
	}()
	errs, took := allReduceOn(t, comms, dev, 3, context.Background(), 1<<16)
	for r := range 3 {
		if errs[r] == nil || took[r] > 10*time.Second {
			t.Errorf("rank %d: %v after %v, want an error within 10 s", r, errs[r], took[r])
		}
	}
}

// TestHostBufferRejected: a host buffer is an *comm.ArgError that says
// what to use, on the rank that passed it, and comm.ErrPeerAbandoned on
// the others, with that rank's own reason (the start of it: a record
// carries reasonBytes); the communicator stays usable.
// errs0Start is the start of the refusing rank's own reason as its
// peers read it: its *comm.ArgError's text, cut to a record's reason.
func errs0Start(err error) string {
	var ae *comm.ArgError
	if !errors.As(err, &ae) {
		return "?"
	}
	s := ae.Error()
	return s[:min(len(s), 96)]
}

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
	if want := "rank 0 ended the collective on its side: " + errs0Start(errs[0]); errs[0] != nil && !strings.Contains(errs[1].Error(), want) {
		t.Errorf("rank 1: %v, want rank 0's own reason, %q", errs[1], want)
	}
	errs2, _ := allReduceOn(t, comms, dev, -1, context.Background(), 16)
	for r, err := range errs2 {
		if err != nil {
			t.Errorf("rank %d, the AllReduce after: %v", r, err)
		}
	}
}
