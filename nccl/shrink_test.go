package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nccl/ncclfake"
	"github.com/hiercomm/hiercomm/shm"
)

// Rank 3 closes mid-AllReduce: the survivors Shrink (agreeing over the
// nexar control) and get a new NCCL communicator of three, in order, on
// which the conformance suite passes on device buffers.
func TestShrinkFake(t *testing.T) {
	comms, dev := fakeWorld(t, 4)
	go func() {
		time.Sleep(200 * time.Millisecond)
		comms[3].Close()
	}()
	errs, _ := allReduceOn(t, comms, dev, 3, context.Background(), 1<<16)
	for r := range 3 {
		if errs[r] == nil {
			t.Fatalf("rank %d: AllReduce succeeded without rank 3", r)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shrunk := make([]comm.Communicator, 3)
	errs = make([]error, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Go(func() {
			s, err := comms[r].Shrink(ctx)
			if err != nil {
				errs[r] = err
				return
			}
			shrunk[r] = s
			if _, ok := s.(*nccl.Comm); !ok || s.Rank() != r || s.Size() != 3 {
				errs[r] = fmt.Errorf("shrunk to %T, rank %d of %d; want an *nccl.Comm, rank %d of 3", s, s.Rank(), s.Size(), r)
			}
		})
	}
	wg.Wait()
	for r := range 3 {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
	}
	defer func() {
		for _, s := range shrunk {
			s.Close()
		}
	}()
	o := options(dev)
	o.Counts = []int{1, 7}
	commtest.Run(t, shrunk, o)
}

// Over a shared-memory control (as on one node under Init): rank 2 of 3
// closes, the survivors shrink the control (fresh shared memory) and make
// NCCL anew over it.
func TestShrinkOverSharedMemory(t *testing.T) {
	lib := ncclfake.New(ncclfake.Options{})
	dev, err := lib.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	controls, err := shm.NewLocal(ctx, fmt.Sprintf("nccl-shrink-%d", time.Now().UnixNano()), 3, shm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	comms := make([]comm.Communicator, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Go(func() { comms[r], errs[r] = nccl.New(ctx, controls[r], nccl.Config{Device: dev}) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	shrunk := make([]comm.Communicator, 2)
	for r := range 3 {
		wg.Go(func() {
			if r == 2 {
				time.Sleep(50 * time.Millisecond)
				errs[r] = comms[r].Close()
				return
			}
			b, err := dev.Alloc(comm.F32, 16)
			if err != nil {
				errs[r] = err
				return
			}
			defer dev.Free(b)
			if err := comms[r].AllReduce(ctx, b, b, comm.Sum); !errors.Is(err, comm.ErrPeerFailed) {
				errs[r] = fmt.Errorf("AllReduce without rank 2: %v", err)
				return
			}
			shrunk[r], errs[r] = comms[r].Shrink(ctx)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	defer func() {
		for _, s := range shrunk {
			s.Close()
		}
	}()
	for r, s := range shrunk {
		if _, ok := s.(*nccl.Comm); !ok || s.Rank() != r || s.Size() != 2 {
			t.Fatalf("rank %d shrunk to %T, rank %d of %d", r, s, s.Rank(), s.Size())
		}
	}
	o := options(dev)
	o.Counts = []int{1, 7}
	commtest.Run(t, shrunk, o)
}
