package hiercomm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
)

// gpuShrink is the child of TestGPUShrink: AllReduce on device memory
// until rank gpuVictim is killed, then World.Shrink, and the conformance
// suite on device buffers over the survivors.
func gpuShrink() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, err := hiercomm.Init(ctx, hiercomm.Options{FailureTimeout: gpuFailureTimeout})
	if err != nil {
		return err
	}
	defer w.Close()
	dev, _, err := gpuWorld(w)
	if err != nil {
		return err
	}
	b, err := gpuFilled(dev, 1<<16, float32(w.Rank()+1))
	if err != nil {
		return err
	}
	defer dev.Free(b)
	for i := 0; ; i++ {
		if err := w.AllReduce(ctx, b, b, comm.Max); err != nil {
			if !errors.Is(err, comm.ErrPeerFailed) {
				return fmt.Errorf("rank %d: AllReduce: %w, want ErrPeerFailed", w.Rank(), err)
			}
			break
		}
		if i == 3 {
			fmt.Printf("gpu-shrink-ready: rank %d\n", w.Rank())
		}
	}
	s, err := w.Shrink(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := commtest.RunRank(ctx, s, commtest.Options{Memory: dev, Counts: []int{1, 7, 4099}}); err != nil {
		return fmt.Errorf("rank %d -> %d: %w", w.Rank(), s.Rank(), err)
	}
	fmt.Printf("gpu shrunk: rank %d -> %d of %d via %T\n", w.Rank(), s.Rank(), s.Size(), s.(*hiercomm.World).Communicator)
	return nil
}

// TestGPUShrink kills one of 3 single-GPU nodes (TCP) during AllReduces
// on device buffers; the survivors Shrink the World (nccl.Staged over
// nexar) and pass the conformance suite on device buffers, as ranks 0
// and 1 of 2.
func TestGPUShrink(t *testing.T) {
	skipWithoutGPU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := &lines{marker: "gpu-shrink-ready", ch: make(chan struct{}, 3)}
	job := startJob(t, ctx, cluster.LocalSpec{RanksPerNode: []int{1, 1, 1}, Network: "tcp", KeepOthers: true, Env: gpuEnv()}, "gpu-shrink", out)
	killWhenReady(t, ctx, job, out, 3, gpuVictim)
	for r, err := range job.Errors() {
		if r != gpuVictim && err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	for _, want := range []string{"gpu shrunk: rank 0 -> 0 of 2 via *nccl.Staged", "gpu shrunk: rank 2 -> 1 of 2 via *nccl.Staged"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q", want)
		}
	}
	if t.Failed() {
		t.Fatal(tail(out.String(), 60))
	}
}
