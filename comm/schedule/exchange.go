package schedule

// PairwiseAllToAll is the pairwise exchange: rank r copies its own block,
// then at step s = 1…P−1 sends its block for r+s (lane 1) and receives the
// block from r−s (lane 0), both at once. sendCounts[j] and recvCounts[j]
// are the elements for and from rank j, laid out in rank order in send and
// recv; every block goes as frames of at most seg elements. With announce
// (AllToAllV) each frame tells its receiver the sender's count.
func PairwiseAllToAll(P, r int, sendCounts, recvCounts []int, seg int, announce bool) Schedule {
	b := newBuilder(1 + 2*(P-1))
	sendOff, recvOff := offsets(sendCounts), offsets(recvCounts)
	b.local(recvLane, -1, Range{Buf: RecvBuf, Off: recvOff[r], Len: recvCounts[r]},
		Range{Buf: SendBuf, Off: sendOff[r], Len: sendCounts[r]}, Copy, false)
	for s := 1; s < P; s++ {
		j := mod(r-s, P)
		first := len(b.s.Steps)
		b.recvMsg(recvLane, -1, j, 0, Range{Buf: RecvBuf, Off: recvOff[j], Len: recvCounts[j]}, seg, Copy)
		for i := first; i < len(b.s.Steps); i++ {
			b.s.Steps[i].Announce = announce
		}
	}
	for s := 1; s < P; s++ {
		j := mod(r+s, P)
		first := len(b.s.Steps)
		b.sendMsg(sendLane, -1, j, 0, Range{Buf: SendBuf, Off: sendOff[j], Len: sendCounts[j]}, seg)
		for i := first; i < len(b.s.Steps); i++ {
			b.s.Steps[i].Announce = announce
		}
	}
	return b.done()
}

// offsets are the starts of blocks of the given lengths laid end to end.
func offsets(counts []int) []int {
	off := make([]int, len(counts))
	sum := 0
	for i, c := range counts {
		off[i] = sum
		sum += c
	}
	return off
}

// Gather: every rank sends its n elements straight to the root, which
// copies its own block and receives the others' at once, one lane per
// peer (the root's link is the bottleneck either way).
func Gather(P, r, root, n, seg int) Schedule {
	b := newBuilder(1 + P*Segments(n, seg))
	if r != root {
		b.sendMsg(0, -1, root, 0, whole(SendBuf, n), seg)
		return b.done()
	}
	b.local(0, -1, Range{Buf: RecvBuf, Off: r * n, Len: n}, whole(SendBuf, n), Copy, false)
	lane := 1
	for j := range P {
		if j != root {
			b.recvMsg(lane, -1, j, 0, Range{Buf: RecvBuf, Off: j * n, Len: n}, seg, Copy)
			lane++
		}
	}
	return b.done()
}

// Scatter: the root copies its own block and sends block j straight to rank
// j, starting with the next rank so that roots spread their load.
func Scatter(P, r, root, n, seg int) Schedule {
	b := newBuilder(1 + P*Segments(n, seg))
	if r != root {
		b.recvMsg(0, -1, root, 0, whole(RecvBuf, n), seg, Copy)
		return b.done()
	}
	b.local(0, -1, whole(RecvBuf, n), Range{Buf: SendBuf, Off: r * n, Len: n}, Copy, false)
	for s := 1; s < P; s++ {
		j := mod(r+s, P)
		b.sendMsg(0, -1, j, 0, Range{Buf: SendBuf, Off: j * n, Len: n}, seg)
	}
	return b.done()
}
