package comm

import (
	"context"
	"encoding/binary"
	"hash/fnv"
)

// Fusing a batch's small AllReduces. On a communicator that runs a batch
// call by call (no BatchStarter), a run of AllReduces that follow one
// another in the batch, on host memory, of one dtype and op, each of at
// most fuseBytes, is started as one AllReduce over a packed copy, as
// AllReduceFused does: the run pays one collective's latency instead of
// one per call. BenchmarkBatch (2 ranks, nexar in memory, f32 sum; the
// figures in docs/architecture.md) measured a batch of 32 AllReduces of
// 1 KiB at 349–397 µs call by call and 52–75 µs packed, 16 of 8 KiB at
// 156–246 µs and 103–151 µs, but 16 of 16 KiB at 167–227 µs and 213–305 µs
// packed (the packing copies cost more than the latency saved): hence
// fuseBytes, on the safe side of 8 KiB. fuseRunBytes, which keeps a packed
// copy small, was not measured on its own.
const (
	fuseBytes    = 4 << 10  // the largest call a run fuses
	fuseRunBytes = 64 << 10 // a run is cut before the call that would pass it
)

// fusable reports whether c can join a fused run: an AllReduce on host
// memory whose arguments are right on their own (a wrong one is left to
// the communicator, which says what is wrong and tells the peers).
func fusable(c Call) bool {
	s, r := c.Send, c.Recv
	return c.Kind == KindAllReduce && s.OnHost() && r.OnHost() && s.DType() == r.DType() && s.Len() == r.Len() &&
		s.ByteLen() <= fuseBytes && (SameMemory(s, r) || !Overlap(s, r)) && CanReduce(s.DType(), c.Op) == nil
}

// fuseRun is the length of the fused run that begins at calls[i]: 0 where
// none does (fewer than two calls would join it).
func fuseRun(calls []Call, i int) int {
	first := calls[i]
	if !fusable(first) {
		return 0
	}
	n, bytes := 1, first.Send.ByteLen()
	for j := i + 1; j < len(calls); j++ {
		c := calls[j]
		if !fusable(c) || c.Op != first.Op || c.Send.DType() != first.Send.DType() || bytes+c.Send.ByteLen() > fuseRunBytes {
			break
		}
		n, bytes = n+1, bytes+c.Send.ByteLen()
	}
	if n < 2 {
		return 0
	}
	return n
}

// startFused starts run, fused AllReduces, as one AllReduce in place over
// a packed copy of their send buffers, and copies each one's part of the
// result into its recv buffer when it is done. The fused call's
// fingerprint is the batch's (h) with the run's lengths, so that ranks
// that cut their runs differently (other lengths, or a rank whose call is
// not fusable, or not fused) disagree on it: a *MismatchError, never the
// wrong elements reduced together.
func startFused(ctx context.Context, c Starter, run []Call, h uint32) *Work {
	dt, total := run[0].Send.DType(), 0
	hash := fnv.New32a()
	var b [8]byte
	binary.LittleEndian.PutUint32(b[:4], h)
	hash.Write(b[:4])
	for _, call := range run {
		total += call.Send.Len()
		binary.LittleEndian.PutUint64(b[:], uint64(call.Send.Len()))
		hash.Write(b[:])
	}
	fp := hash.Sum32()
	if fp == 0 {
		fp = 1
	}
	sends, recvs := make([]Buffer, len(run)), make([]Buffer, len(run))
	for k, call := range run {
		sends[k], recvs[k] = call.Send, call.Recv
	}
	return startPacked(context.WithValue(ctx, batchKey{}, fp), c, dt, total, sends, recvs, run[0].Op)
}
