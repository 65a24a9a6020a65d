package main

import (
	"testing"

	"github.com/hiercomm/hiercomm/examples/internal/launch"
)

// TestGoesOnAfterARankIsKilled: on 2 nodes x 2 ranks, one rank kills
// itself (SIGKILL) as a step begins; the three survivors get the failure,
// Shrink to a hierarchy of three, take their new shares of each global
// batch, and finish the run with bitwise identical replicas: every
// step's averaged gradient, before and after the failure, is one
// process's at the same weights within its float32 bound, and (with SGD,
// where the trajectories are comparable) the losses and weights are one
// process's on the same global batches (-check-steps 12). Rank 1 dies
// before step 5 of a -batch 48 run, which the survivors divide (16 samples
// each instead of 12); rank 3 before step 6 of a run with the default
// batch, 128, which they do not (43, 43 and 42: dp.Shard).
func TestGoesOnAfterARankIsKilled(t *testing.T) {
	const args = "-train 2048 -test 512 -steps 12 -log 4 -check-steps 12 -hidden 64,32 -opt sgd -lr 0.05"
	for _, c := range []struct {
		name, args string
		lost       int
		want       []string
	}{
		{"divides", "-batch 48 -kill-rank 1 -kill-step 5", 1, []string{
			"elastic: 4 ranks on 2 nodes; rank 1 dies at step 5 of 12",
			"step     4/12  epoch 1  4 ranks",
			"step 5: averaging the gradients: rank 1 (node 0, local 1",
			"going on from step 5 with 16 samples per rank",
		}},
		{"does not divide", "-kill-rank 3 -kill-step 6", 3, []string{
			"elastic: 4 ranks on 2 nodes; rank 3 dies at step 6 of 12",
			"step     4/12  epoch 1  4 ranks",
			"step 6: averaging the gradients: rank 3 (node 1, local 1",
			"going on from step 6 with 43 samples on ranks 0-1 and 42 on rank 2",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := launch.RunLosing(t, []int{2, 2}, args+" "+c.args, c.lost)
			launch.Expect(t, out, append(c.want,
				"shrunk to 3 ranks (*hiercomm.World)",
				"step    12/12  epoch 1  3 ranks",
				"gradient check, steps 1-12: the 3 ranks' averaged gradient",
				"every element within its bound: yes",
				"all 3 replicas hold bitwise identical weights",
				"same loss as one process: yes",
			)...)
		})
	}
}

// TestGrowsBackAfterARankIsKilled: as TestGoesOnAfterARankIsKilled, and
// the job grows back (-grow-to 4): a replacement for the dead rank,
// started on its node with HIERCOMM_JOIN=running, is admitted at the
// survivors' next step, receives rank 0's step, weights and optimizer
// state, and the four ranks (the newcomer last) finish the run on their
// new shares with bitwise identical replicas, the losses and weights of
// one process on the same global batches, and every step's averaged
// gradient one process's.
func TestGrowsBackAfterARankIsKilled(t *testing.T) {
	const args = "-train 2048 -test 512 -steps 12 -log 4 -check-steps 12 -hidden 64,32 -opt sgd -lr 0.05 -kill-rank 1 -kill-step 5 -grow-to 4"
	out := launch.RunReplacing(t, []int{2, 2}, args, 1, "shrunk to 3 ranks")
	launch.Expect(t, out,
		"elastic: 4 ranks on 2 nodes; rank 1 dies at step 5 of 12",
		"shrunk to 3 ranks (*hiercomm.World)",
		"grown to 4 ranks (*hierarchy.Comm, generation 1)",
		"[newcomer] elastic: rank 3 of 4 on 2 nodes, admitted into the running job: holding rank 0's weights and optimizer state after step 4, going on from step 5",
		"step    12/12  epoch 1  4 ranks",
		"gradient check, steps 1-12: the 4 ranks' averaged gradient",
		"every element within its bound: yes",
		"all 4 replicas hold bitwise identical weights",
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
