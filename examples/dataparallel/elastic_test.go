package main

import (
	"testing"

	"github.com/hiercomm/hiercomm/examples/internal/launch"
)

// TestGoesOnAfterARankIsKilled: on 2 nodes x 2 ranks, rank 1 kills
// itself (SIGKILL) as step 5 begins (after 4); the three survivors get the failure,
// Shrink to a hierarchy of three, take 16 of the 48 samples of each
// global batch instead of 12, and finish the run with bitwise identical
// replicas: every step's averaged gradient, before and after the failure,
// is one process's at the same weights within its float32 bound, and
// (with SGD, where the trajectories are comparable) the losses and weights
// are one process's on the same global batches (-check-steps 12).
func TestGoesOnAfterARankIsKilled(t *testing.T) {
	out := launch.RunLosing(t, []int{2, 2}, "-train 2048 -test 512 -batch 48 -steps 12 -log 4 -check-steps 12 -hidden 64,32 -opt sgd -lr 0.05 -kill-rank 1 -kill-step 5", 1)
	launch.Expect(t, out,
		"elastic: 4 ranks on 2 nodes; rank 1 dies at step 5 of 12",
		"step     4/12  epoch 1  4 ranks",
		"shrunk to 3 ranks (*hiercomm.World)",
		"step 5: averaging the gradients: rank 1 (node 0, local 1",
		"going on from step 5 with 16 samples per rank",
		"step    12/12  epoch 1  3 ranks",
		"gradient check, steps 1-12: the 3 ranks' averaged gradient",
		"every element within its bound: yes",
		"all 3 replicas hold bitwise identical weights",
		"same loss as one process: yes",
	)
}

// TestElasticFlags: -kill-rank and -kill-step go together.
func TestElasticFlags(t *testing.T) {
	for _, args := range [][]string{{"-kill-rank", "1"}, {"-kill-step", "3"}, {"-kill-rank", "1", "-kill-step", "0"}} {
		if _, err := parse(args); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
	if _, err := parse([]string{"-kill-rank", "1", "-kill-step", "3"}); err != nil {
		t.Errorf("both: %v", err)
	}
}
