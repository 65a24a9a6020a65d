package schedule

// TreeBroadcast is the binomial tree over recv (n elements, the root's
// holding the data), on one lane: in relative ranks v = r − root, rank v
// receives from v − 2^j for the lowest set bit j of v, then sends to
// v + 2^i for every i below j (largest first), ⌈log₂ P⌉ rounds in all.
func TreeBroadcast(P, r, root, n, seg int) Schedule {
	b := newBuilder((log2Floor(P) + 1) * Segments(n, seg))
	buf := whole(RecvBuf, n)
	v := mod(r-root, P)
	mask := 1
	for mask < P {
		if v&mask != 0 {
			b.recvMsg(0, -1, mod(v-mask+root, P), 0, buf, seg, Copy)
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < P {
			b.sendMsg(0, -1, mod(v+mask+root, P), 0, buf, seg)
		}
	}
	return b.done()
}

// ChainBroadcast passes recv (n elements, the root's holding the data) down
// the chain root, root+1, …, root−1 in pieces of at most seg elements:
// each rank forwards piece s (lane 1) as soon as it has received it
// (lane 0), so for S pieces the time is P−2+S piece steps, not (P−1)·S.
func ChainBroadcast(P, r, root, n, seg int) Schedule {
	b := newBuilder(2 * Segments(n, seg))
	if P == 1 {
		return b.done()
	}
	v := mod(r-root, P)
	next, prev := mod(r+1, P), mod(r-1, P)
	S := Segments(n, seg)
	piece := func(s int) Range {
		o, l := pieceRange(n, seg, s)
		return Range{Buf: RecvBuf, Off: o, Len: l}
	}
	if v == 0 {
		for s := range S {
			b.send(0, -1, next, uint32(s), piece(s))
		}
		return b.done()
	}
	for s := range S {
		got := b.recv(recvLane, -1, prev, uint32(s), piece(s), Copy)
		if v < P-1 {
			b.send(sendLane, got, next, uint32(s), piece(s))
		}
	}
	return b.done()
}

// BinomialReduce combines every rank's send (n elements) into the root's
// recv over a binomial tree, pipelined by pieces of at most seg elements:
// in relative ranks v = r − root, rank v's children are v + 2^i for every
// i below the lowest set bit of v (all i for the root), its parent v − 2^j
// for that bit j. For each piece a rank reduces its own part with its
// children's, in increasing order so that the order is fixed (lane 0, into
// a temp slot), and passes the result up (lane 1) while it works on the
// next piece.
func BinomialReduce(P, r, root, n, seg int) Schedule {
	b := newBuilder(1 + (log2Floor(P)+3)*Segments(n, seg))
	v := mod(r-root, P)
	var children []int
	parent := -1
	for mask := 1; mask < P; mask <<= 1 {
		if v&mask != 0 {
			parent = mod(v-mask+root, P)
			break
		}
		if v+mask < P {
			children = append(children, mod(v+mask+root, P))
		}
	}
	S := Segments(n, seg)
	if parent < 0 {
		b.local(recvLane, -1, whole(RecvBuf, n), whole(SendBuf, n), Copy, false)
		for s := range S {
			o, l := pieceRange(n, seg, s)
			acc := Range{Buf: RecvBuf, Off: o, Len: l}
			for _, ch := range children {
				b.recv(recvLane, -1, ch, uint32(s), acc, Reduce)
			}
			b.finish(recvLane, acc)
		}
		return b.done()
	}
	if len(children) == 0 {
		for s := range S {
			o, l := pieceRange(n, seg, s)
			b.send(0, -1, parent, uint32(s), Range{Buf: SendBuf, Off: o, Len: l})
		}
		return b.done()
	}
	for s := range S {
		o, l := pieceRange(n, seg, s)
		acc := Range{Buf: TempBuf, Slot: b.temp(l), Len: l}
		b.local(recvLane, -1, acc, Range{Buf: SendBuf, Off: o, Len: l}, Copy, false)
		last := -1
		for _, ch := range children {
			last = b.recv(recvLane, -1, ch, uint32(s), acc, Reduce)
		}
		i := b.send(sendLane, last, parent, uint32(s), acc)
		b.s.Steps[i].Free = true
	}
	return b.done()
}
