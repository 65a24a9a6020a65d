package main

import (
	"slices"

	"github.com/hiercomm/hiercomm/comm"
)

// fault is a bug the tests plant in the sharded stages' ReduceScatter to
// see the gradient check catch it (main_test.go sets inject in the ranks
// it starts; a run of the command never has one).
type fault string

const (
	faultSum     fault = "sum"     // the ReduceScatter sums the gradients instead of averaging them
	faultChunk   fault = "chunk"   // rank r gets chunk r+1 (mod N) of the reduction (nexar's reduce_scatter defect)
	faultMissing fault = "missing" // layer 0's gradient is never reduced: each rank keeps its own chunk
	faultStale   fault = "stale"   // from the second step on, layer 0's chunk is the step before's
)

// inject is the fault planted in this process ("" for none).
var inject fault

// scatterOp is the ReduceScatter's reduction.
func scatterOp() comm.ReduceOp {
	if inject == faultSum {
		return comm.Sum
	}
	return comm.Avg
}

// beforeScatter plants a fault in layer l's padded gradient full before
// its ReduceScatter (c elements a chunk); it says whether to skip the
// ReduceScatter, having put this rank's own chunk where it would land.
func (k *link) beforeScatter(full, shard []float32, l, c int) (skip bool) {
	switch {
	case inject == faultChunk:
		rotated := slices.Concat(full[c:], full[:c])
		copy(full, rotated)
	case inject == faultMissing && l == 0:
		copy(shard, full[k.lay.rank*c:(k.lay.rank+1)*c])
		return true
	}
	return false
}

// afterScatter plants a fault in layer l's chunk of the reduced gradient.
func (k *link) afterScatter(chunk []float32, l int) {
	if inject != faultStale || l != 0 {
		return
	}
	if k.stale == nil { // the first step's is right; the next ones get the step before's
		k.stale = slices.Clone(chunk)
		return
	}
	for i := range chunk {
		chunk[i], k.stale[i] = k.stale[i], chunk[i]
	}
}
