package main

import (
	"context"
	"testing"

	"github.com/hiercomm/hiercomm/examples/internal/launch"
)

// The test binary is started again as each rank of a local job.
func TestMain(m *testing.M) {
	launch.TestMain(m, func(args []string) error { return run(context.Background(), args) })
}

// TestTrainsOnTwoNodes trains a few steps on 2 nodes × 2 ranks (the
// hierarchical world) on a slice of MNIST with a small net (the race
// detector slows the passes tenfold), a bucket per layer so that
// AllReduces overlap backward, and relies on the example's own
// checks: every replica bitwise identical, and the same losses and
// weights as one process on the same global batches (rank 0 runs it; any
// rank fails the job when the check fails).
func TestTrainsOnTwoNodes(t *testing.T) {
	out := launch.Run(t, []int{2, 2}, "-train 2048 -test 512 -batch 64 -steps 12 -log 4 -check-steps 12 -hidden 128,64 -bucket-mib 0.01")
	launch.Expect(t, out,
		"4 ranks on 2 nodes",
		"gradient buckets in backward order (cap 0.01 MiB): [layer 2 (0.00 MiB) layer 1 (0.03 MiB) layer 0 (0.38 MiB)]",
		"step    12/12",
		"communication hidden",
		"test accuracy",
		"all 4 replicas hold bitwise identical weights",
		"one process on the same 12 global batches",
		"same loss as one process: yes",
	)
}

// TestBadFlags: a flag the trainer cannot honour is an error before any
// work, naming the flag.
func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-bucket-mib", "0"},
		{"-check-steps", "-1"},
		{"-comm-procs", "-1"},
		{"-hidden", "64,x"},
		{"extra"},
	} {
		if _, err := parse(args); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
}
