package main

import (
	"slices"

	"github.com/hiercomm/hiercomm/comm"
)

// fault is a bug the tests plant in the trainer to see the gradient
// check catch it (main_test.go sets inject in the ranks it starts; a run
// of the command never has one). Each is a mistake a data-parallel
// trainer or its communicator can make.
type fault string

const (
	faultSum     fault = "sum"     // the buckets' AllReduce sums the gradients instead of averaging them
	faultMissing fault = "missing" // layer 0's gradient (the last bucket's) is never reduced: each rank keeps its own
	faultStale   fault = "stale"   // from the second step on, layer 0's gradient holds the step before's reduced gradient
	faultShare   fault = "share"   // rank 1 trains on rank 0's share of each global batch instead of its own
)

// inject is the fault planted in this process ("" for none).
var inject fault

// reduceOp is the buckets' reduction.
func reduceOp() comm.ReduceOp {
	if inject == faultSum {
		return comm.Sum
	}
	return comm.Avg
}

// shareOf is the rank whose share of each global batch rank takes.
func shareOf(rank int) int {
	if inject == faultShare && rank == 1 {
		return 0
	}
	return rank
}

// firstReduced is the first layer whose gradient is reduced.
func firstReduced() int {
	if inject == faultMissing {
		return 1
	}
	return 0
}

// corrupt plants a fault in the reduced gradient, as fetch leaves it.
func (r *reducer) corrupt() {
	if inject != faultStale {
		return
	}
	off, n := r.net.Layout(0)
	g := r.grad.Host[off : off+n]
	if r.stale == nil { // the first step's is right; the next ones get the step before's
		r.stale = slices.Clone(g)
		return
	}
	for i := range g {
		g[i], r.stale[i] = r.stale[i], g[i]
	}
}
