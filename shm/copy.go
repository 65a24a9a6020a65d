package shm

// How the schedules move bytes. Three choices decide most of their speed
// on a host, where every collective is a few passes over memory:
//
//   - Steps are small enough for the caches. A step stages at most
//     Config.StepBytes of a rank's message, so what a rank writes into its part
//     is still in a cache (its own, or the shared last level) when its
//     peers read it, and what it copies out is in theirs.
//   - Staging copies are cache-friendly. Go's copy() switches to
//     non-temporal stores from 1 MiB on amd64; staged bytes written that
//     way go to memory just before a peer reads them back. stage copies in
//     pieces below that size.
//   - Results of large collectives are written around the caches. When
//     the bytes a collective writes into all ranks' results exceed what
//     the caches hold (Config.NonTemporalBytes), writing them with non-temporal stores
//     (copyOut) saves reading every line of the destination from memory
//     before overwriting it; below that, ordinary stores keep the result
//     in cache for the caller.
//
// The step size (Config.StepBytes) and the threshold of non-temporal
// results (Config.NonTemporalBytes) are configuration; the piece size of
// stage follows from copy() and is not.

// stagePiece is the largest single copy that stage makes: below the size
// from which copy() uses non-temporal stores.
const stagePiece = 512 << 10

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
// copies into a result: copyOut when they are too large for the caches
// (Config.NonTemporalBytes), else copy.
func (s *stepper) putFor(total int) func(dst, src []byte) {
	if nt := s.c.cfg.NonTemporalBytes; nt >= 0 && total >= nt {
		return copyOut
	}
	return copyIn
}

func copyIn(dst, src []byte) { copy(dst, src) }
