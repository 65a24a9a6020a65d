package dp

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/hiercomm/hiercomm/comm"
)

// Broadcast gives every rank of c root's params: one Broadcast per buffer,
// in order, all started before any is waited for. Every rank passes buffers
// of the same dtypes and lengths in the same order (a difference is c's
// *comm.MismatchError, on every rank). It returns the first error, naming
// the buffer.
func Broadcast(ctx context.Context, c comm.Communicator, root int, params ...comm.Buffer) error {
	works := make([]*comm.Work, len(params))
	for i, p := range params {
		works[i] = comm.StartBroadcast(ctx, c, p, root)
	}
	var first error
	for i, w := range works {
		if err := w.Wait(); err != nil && first == nil {
			first = fmt.Errorf("dp.Broadcast of params[%d] (%v) from rank %d: %w", i, params[i], root, err)
		}
	}
	return first
}

// Hash is a digest of the bits of params: FNV-1a (64 bits) of their bytes,
// one buffer after another. Two ranks whose parameters hash alike hold the
// same bits, but for a collision of 2⁻⁶⁴. params must be host buffers: Hash
// panics on device memory, which it cannot read (copy it to the host).
func Hash(params ...comm.Buffer) uint64 {
	h := fnv.New64a()
	for i, p := range params {
		if !p.OnHost() && p.Len() > 0 {
			panic(fmt.Sprintf("dp.Hash: params[%d] is %v, not host memory", i, p))
		}
		h.Write(p.Bytes())
	}
	return h.Sum64()
}

// Identical checks that every rank of c holds the same bits in params (the
// replica check of a data-parallel trainer): each rank's Hash of params is
// gathered to every rank (one AllGather), so every rank returns the same
// verdict: nil, or an error naming the ranks whose parameters differ from
// rank 0's. A rank whose params cannot be hashed (device memory) still
// takes part in the AllGather, so no rank waits for it: its error names
// the buffer, the other ranks' name the rank.
func Identical(ctx context.Context, c comm.Communicator, params ...comm.Buffer) error {
	mine := []uint64{0, 0} // the hash, and 1 if this rank could not hash
	bad := -1
	for i, p := range params {
		if !p.OnHost() && p.Len() > 0 {
			bad = i
			break
		}
	}
	if bad < 0 {
		mine[0] = Hash(params...)
	} else {
		mine[1] = 1
	}
	all := make([]uint64, 2*c.Size())
	if err := c.AllGather(ctx, comm.Host(mine), comm.Host(all)); err != nil {
		return fmt.Errorf("dp.Identical: gathering the replicas' hashes: %w", err)
	}
	if bad >= 0 {
		return fmt.Errorf("dp.Identical: params[%d] is %v: Identical hashes host memory (copy the parameters to the host first)", bad, params[bad])
	}
	var differ, unhashed []int
	hashes := make([]uint64, 0, c.Size())
	for r := range c.Size() {
		h, no := all[2*r], all[2*r+1]
		hashes = append(hashes, h)
		switch {
		case no != 0:
			unhashed = append(unhashed, r)
		case h != all[0]:
			differ = append(differ, r)
		}
	}
	switch {
	case len(unhashed) > 0:
		return fmt.Errorf("dp.Identical: ranks %v passed device memory, which Identical cannot hash: the replicas were not compared", unhashed)
	case len(differ) > 0:
		return fmt.Errorf("dp.Identical: the parameters of ranks %v differ from rank 0's (hashes %x)", differ, hashes)
	}
	return nil
}
