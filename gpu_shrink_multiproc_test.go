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
	"github.com/hiercomm/hiercomm/nccl"
)

// gpuShrink is the child of TestGPUShrink: AllReduce on device memory
// until rank gpuVictim is killed, then World.Shrink, and the conformance
// suite on device buffers over the survivors.
func gpuShrink() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, dev, done, err := gpuUntilLost(ctx, "gpu-shrink-ready")
	if err != nil {
		return err
	}
	defer done()
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

// gpuGrow is the child of TestGPUGrow: as gpuShrink until the Shrink,
// then World.Grow until the replacement the test starts is admitted, and
// the conformance suite on device buffers over the grown World. The
// replacement (gpuGrowNewcomer) runs the suite beside them.
func gpuGrow() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, _, done, err := gpuUntilLost(ctx, "gpu-grow-ready")
	if err != nil {
		return err
	}
	defer done()
	s, err := w.Shrink(ctx)
	if err != nil {
		return err
	}
	sw := s.(*hiercomm.World)
	defer sw.Close()
	fmt.Printf("gpu-grow-shrunk: rank %d\n", w.Rank())
	g := sw
	for g == sw {
		if g, err = sw.Grow(ctx, 0); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer g.Close()
	return gpuGrown(ctx, g, fmt.Sprintf("rank %d", w.Rank()))
}

// gpuGrowNewcomer is TestGPUGrow's replacement.
func gpuGrowNewcomer() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, err := hiercomm.Init(ctx, hiercomm.Options{FailureTimeout: gpuFailureTimeout})
	if err != nil {
		return err
	}
	defer w.Close()
	return gpuGrown(ctx, w, "newcomer")
}

// gpuGrown runs the conformance suite on device buffers over a grown
// World, and says which rank of it this process is.
func gpuGrown(ctx context.Context, g *hiercomm.World, who string) error {
	dev := g.Device()
	if dev == nil {
		return fmt.Errorf("%s: the grown World moves host memory (%T)", who, g.Communicator)
	}
	if err := commtest.RunRank(ctx, g, commtest.Options{Memory: dev, Counts: []int{1, 7, 4099}}); err != nil {
		return fmt.Errorf("%s, rank %d of the grown World: %w", who, g.Rank(), err)
	}
	fmt.Printf("gpu grown: %s is rank %d of %d via %T\n", who, g.Rank(), g.Size(), g.Communicator)
	return nil
}

// TestGPUGrow kills one of 3 single-GPU nodes (TCP) during AllReduces on
// device buffers; the survivors Shrink, a replacement on the dead rank's
// node joins the running job (HIERCOMM_JOIN=running), the members Grow,
// and the three pass the conformance suite on device buffers over the
// grown World (nccl.Staged over nexar), the replacement last.
func TestGPUGrow(t *testing.T) {
	skipWithoutGPU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := &lines{marker: "gpu-grow-ready", ch: make(chan struct{}, 3)}
	job := startJob(t, ctx, cluster.LocalSpec{RanksPerNode: []int{1, 1, 1}, Network: "tcp", KeepOthers: true, Env: gpuEnv()}, "gpu-grow", out)
	killWhenReady(t, ctx, job, out, 3, gpuVictim)
	waitFor(t, out, "gpu-grow-shrunk:", 2)
	if err := startJoiner(t, ctx, job, gpuVictim, out, "gpu-grow-newcomer").Wait(); err != nil {
		t.Errorf("the replacement: %v", err)
	}
	for r, err := range job.Errors() {
		if r != gpuVictim && err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	for _, want := range []string{"gpu grown: rank 0 is rank 0 of 3 via *nccl.Staged", "gpu grown: newcomer is rank 2 of 3 via *nccl.Staged"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q", want)
		}
	}
	if t.Failed() {
		t.Fatal(out.String())
	}
	t.Log(out.String())
}

// gpuUntilLost joins a GPU World and AllReduces on device memory, saying
// ready (the test's marker) after a few, until one fails because a rank
// was killed; done frees and closes what it made.
func gpuUntilLost(ctx context.Context, ready string) (w *hiercomm.World, dev *nccl.Device, done func(), err error) {
	w, err = hiercomm.Init(ctx, hiercomm.Options{FailureTimeout: gpuFailureTimeout})
	if err != nil {
		return nil, nil, nil, err
	}
	if dev, _, err = gpuWorld(w); err != nil {
		w.Close()
		return nil, nil, nil, err
	}
	b, err := gpuFilled(dev, 1<<16, float32(w.Rank()+1))
	if err != nil {
		w.Close()
		return nil, nil, nil, err
	}
	done = func() { dev.Free(b); w.Close() }
	for i := 0; ; i++ {
		if err := w.AllReduce(ctx, b, b, comm.Max); err != nil {
			if !errors.Is(err, comm.ErrPeerFailed) {
				done()
				return nil, nil, nil, fmt.Errorf("rank %d: AllReduce: %w, want ErrPeerFailed", w.Rank(), err)
			}
			return w, dev, done, nil
		}
		if i == 3 {
			fmt.Printf("%s: rank %d\n", ready, w.Rank())
		}
	}
}
