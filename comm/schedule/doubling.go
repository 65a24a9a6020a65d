package schedule

import "fmt"

// DoublingAllReduce is recursive doubling over n elements, the
// latency-optimal AllReduce for small messages, on one lane: rank r copies
// its send into recv, then with pof2 the largest power of two ≤ P and
// rem = P − pof2 the first 2·rem ranks pair up and the even one of each
// pair hands its vector to the odd one (fold in), leaving pof2
// participants. They run log₂ pof2 rounds: in round k, virtual rank v
// exchanges the whole vector with v XOR 2^k and both compute lower ⊕ higher,
// so both get the same bits. Finally the odd ranks of the folded pairs send
// the result back (fold out). Messages are cut into frames of at most seg
// elements.
func DoublingAllReduce(P, r, n, seg int) Schedule {
	b := newBuilder(2 + 2*Segments(n, seg)*(log2Floor(P)+1))
	b.doubling(P, r, whole(RecvBuf, n), seg)
	return b.done()
}

// DoublingReduceScatter is the ReduceScatter of P·n elements into blocks
// of n for small messages: recursive doubling (DoublingAllReduce) of the
// whole send buffer into a temp slot, then this rank's block r copied
// into recv. It takes ⌈log₂ P⌉ rounds where the ring takes P−1, each
// moving the whole vector rather than one block: CostModel.ReduceScatter
// says where it is the faster.
func DoublingReduceScatter(P, r, n, seg int) Schedule {
	b := newBuilder(3 + 2*Segments(P*n, seg)*(log2Floor(P)+1))
	slot := b.temp(P * n)
	b.doubling(P, r, Range{Buf: TempBuf, Slot: slot, Len: P * n}, seg)
	b.local(0, -1, whole(RecvBuf, n), Range{Buf: TempBuf, Slot: slot, Off: r * n, Len: n}, Copy, true)
	return b.done()
}

// doubling adds recursive doubling's steps on lane 0: the send buffer,
// all of buf's length, reduced across the ranks into buf.
func (b *builder) doubling(P, r int, buf Range, seg int) {
	n := buf.Len
	b.local(0, -1, buf, whole(SendBuf, n), Copy, false)
	if P == 1 {
		return
	}
	pcs := uint32(Segments(n, seg))
	pof2 := 1
	for pof2*2 <= P {
		pof2 *= 2
	}
	rem := P - pof2
	virt := r - rem // rank among the pof2 participants, or -1
	if r < 2*rem {
		if r%2 == 0 {
			b.sendMsg(0, -1, r+1, 0, buf, seg)
			virt = -1
		} else {
			b.recvMsg(0, -1, r-1, 0, buf, seg, ReduceFirst)
			virt = r / 2
		}
	}
	real := func(v int) int {
		if v < rem {
			return 2*v + 1
		}
		return v + rem
	}
	round := uint32(1)
	if virt >= 0 {
		for mask := 1; mask < pof2; mask <<= 1 {
			pv := virt ^ mask
			peer := real(pv)
			b.sendMsg(0, -1, peer, round*pcs, buf, seg)
			op := Reduce
			if pv < virt {
				op = ReduceFirst
			}
			b.recvMsg(0, -1, peer, round*pcs, buf, seg, op)
			round++
		}
		b.finish(0, buf)
	}
	if r < 2*rem {
		// Both partners know the round count: ⌊log₂ P⌋ + 1.
		last := uint32(1+log2Floor(pof2)) * pcs
		if r%2 == 1 {
			b.sendMsg(0, -1, r-1, last, buf, seg)
		} else {
			b.recvMsg(0, -1, r+1, last, buf, seg, Copy)
		}
	}
}

// HalvingReduceScatter is the ReduceScatter of P·n elements into blocks of
// n by recursive halving, for P a power of two (Rabenseifner's first
// half): log₂ P rounds, in each of which a rank keeps half of the blocks
// it still holds and exchanges the other half with its partner at
// distance P/2, P/4, …, 1, reducing the partner's copy of the kept half
// into its own. It moves what the ring moves ((P−1)/P of the send buffer
// per rank) in log₂ P messages rather than P−1, and reduces what the
// ring reduces. Partials live in one temp slot of (P/2)·n elements,
// which starts as this rank's kept half of send and is reduced in place
// (each frame straight from the wire into it); every block is reduced by
// one rank alone, its own partial first, so the result is the same on
// every run. One lane; a message is cut into frames of at most seg
// elements. P must be a power of two (CostModel.ReduceScatter picks it
// only then).
func HalvingReduceScatter(P, r, n, seg int) Schedule {
	if P&(P-1) != 0 {
		panic(fmt.Sprintf("schedule: HalvingReduceScatter on %d ranks, not a power of two", P))
	}
	rounds := log2Floor(P)
	pcs := uint32(Segments(P/2*n, seg))
	b := newBuilder(3 + 2*rounds*int(pcs))
	if P == 1 {
		b.local(0, -1, whole(RecvBuf, n), whole(SendBuf, n), Copy, false)
		b.finish(0, whole(RecvBuf, n))
		return b.done()
	}
	slot := b.temp(P / 2 * n)
	// The blocks [lo, hi) this rank still holds: in send before the first
	// round; after it in the slot, whose first element is block base's.
	lo, hi, base := 0, P, 0
	blocks := func(buf Buf, from, to int) Range {
		if buf == SendBuf {
			return Range{Buf: SendBuf, Off: from * n, Len: (to - from) * n}
		}
		return Range{Buf: TempBuf, Slot: slot, Off: (from - base) * n, Len: (to - from) * n}
	}
	buf := SendBuf
	for round, m := uint32(0), P/2; m >= 1; round, m = round+1, m/2 {
		mid := lo + (hi-lo)/2
		keepLo, keepHi, sendLo, sendHi := lo, mid, mid, hi
		if r&m != 0 {
			keepLo, keepHi, sendLo, sendHi = mid, hi, lo, mid
		}
		peer := r ^ m
		b.sendMsg(0, -1, peer, round*pcs, blocks(buf, sendLo, sendHi), seg)
		if buf == SendBuf {
			base = keepLo
			b.local(0, -1, blocks(TempBuf, keepLo, keepHi), blocks(SendBuf, keepLo, keepHi), Copy, false)
		}
		b.recvMsg(0, -1, peer, round*pcs, blocks(TempBuf, keepLo, keepHi), seg, Reduce)
		buf, lo, hi = TempBuf, keepLo, keepHi
	}
	b.local(0, -1, whole(RecvBuf, n), blocks(TempBuf, r, r+1), Copy, true)
	b.finish(0, whole(RecvBuf, n))
	return b.done()
}
