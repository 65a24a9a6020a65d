package schedule

// Scan is Hillis–Steele over n elements, on one lane: in round k (distance
// d = 2^k) rank r sends its inclusive partial to r+d and combines the one
// from r−d in front of its own, so after ⌈log₂ P⌉ rounds
// incl(r) = x₀ ⊕ … ⊕ x_r. The inclusive partial lives in recv (in a temp
// slot for ExScan, where recv keeps the exclusive partial x₀ … x_{r−1}
// the same way; rank 0, which has no predecessor, gets the op's identity).
func Scan(P, r, n, seg int, exclusive bool) Schedule {
	b := newBuilder(2 + (log2Floor(P)+1)*(2*Segments(n, seg)+2))
	incl := whole(RecvBuf, n)
	if exclusive {
		incl = Range{Buf: TempBuf, Slot: b.temp(n), Len: n}
	}
	b.local(0, -1, incl, whole(SendBuf, n), Copy, false)
	got := Range{Buf: TempBuf, Slot: b.temp(n), Len: n}
	pcs := uint32(Segments(n, seg))
	first := true
	round := uint32(0)
	for d := 1; d < P; d <<= 1 {
		if r+d < P {
			b.sendMsg(0, -1, r+d, round*pcs, incl, seg)
		}
		if r-d >= 0 {
			b.recvMsg(0, -1, r-d, round*pcs, got, seg, Copy)
			if exclusive {
				op := ReduceFirst // lower ranks first
				if first {
					op = Copy
				}
				b.local(0, -1, whole(RecvBuf, n), got, op, false)
			}
			b.local(0, -1, incl, got, ReduceFirst, true)
			first = false
		}
		round++
	}
	if exclusive && r == 0 {
		b.add(Step{Kind: Identity, After: -1, Dst: whole(RecvBuf, n)})
	}
	return b.done()
}

// Barrier is the dissemination barrier, on one lane: in round k rank r
// sends an empty frame to r+2^k and waits for one from r−2^k; after
// ⌈log₂ P⌉ rounds every rank has heard, directly or not, from every other.
func Barrier(P, r int) Schedule {
	b := newBuilder(2 * (log2Floor(P) + 1))
	round := uint32(0)
	for d := 1; d < P; d <<= 1 {
		b.send(0, -1, mod(r+d, P), round, Range{Buf: RecvBuf})
		b.recv(0, -1, mod(r-d, P), round, Range{Buf: RecvBuf}, Copy)
		round++
	}
	return b.done()
}
