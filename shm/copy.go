package shm

// How the schedules move bytes. Three choices decide most of their speed
// on a host, where every collective is a few passes over memory:
//
//   - Steps are small enough for the caches. A step stages at most
//     stepBytes of a rank's message, so what a rank writes into its part
//     is still in a cache (its own, or the shared last level) when its
//     peers read it, and what it copies out is in theirs.
//   - Staging copies are cache-friendly. Go's copy() switches to
//     non-temporal stores from 1 MiB on amd64; staged bytes written that
//     way go to memory just before a peer reads them back. stage copies in
//     pieces below that size.
//   - Results of large collectives are written around the caches. When
//     the bytes a collective writes into all ranks' results exceed what
//     the caches hold (ntBytes), writing them with non-temporal stores
//     (copyOut) saves reading every line of the destination from memory
//     before overwriting it; below that, ordinary stores keep the result
//     in cache for the caller.
//
// Variables, not constants, so that tests and benchmarks can move them.
var (
	// stepBytes bounds the bytes of its message that one rank moves
	// through one step. Measured on 2 cores (AllReduce, AllGather,
	// Broadcast at 1–16 MiB, 2 and 4 ranks): 512 KiB is as fast as any
	// size from 256 KiB to 1 MiB and faster than 128 KiB or a whole part.
	stepBytes = 512 << 10
	// stagePiece is the largest single copy that stage makes: below the
	// size from which copy() uses non-temporal stores.
	stagePiece = 512 << 10
	// ntBytes: from this many bytes of results over all ranks, results
	// are written with non-temporal stores. Measured on 2 cores: a 4 MiB
	// AllReduce on 2 ranks (8 MiB of results, in cache) is faster with
	// ordinary stores, on 4 ranks (16 MiB) and a 16 MiB one on 2 ranks
	// with non-temporal ones.
	ntBytes = 16 << 20
)

// stage copies src into dst (a part) in pieces of at most stagePiece.
func stage(dst, src []byte) {
	for len(src) > stagePiece {
		copy(dst[:stagePiece], src[:stagePiece])
		dst, src = dst[stagePiece:], src[stagePiece:]
	}
	copy(dst, src)
}

// resultBytes is what a collective writes into results over all ranks:
// n bytes on every rank (root < 0) or on the root only.
func (s *stepper) resultBytes(n, root int) int {
	if root >= 0 {
		return n
	}
	return n * s.c.size
}

// putFor is how a collective whose results total bytes over all ranks
// copies into a result: copyOut when they are too large for the caches,
// else copy.
func putFor(total int) func(dst, src []byte) {
	if total >= ntBytes {
		return copyOut
	}
	return copyIn
}

func copyIn(dst, src []byte) { copy(dst, src) }
