package schedule

// The ring schedules. Lane 0 receives (and reduces or copies what
// arrives); lane 1 sends. A segment of stage t leaves, on lane 1, once
// lane 0 has handled the same segment of stage t−1, so sending, receiving
// and reducing overlap, and the segments of a block are pipelined around
// the ring.
const (
	recvLane = 0
	sendLane = 1
)

// RingAllReduce is the bandwidth-optimal ring over n elements: rank r first
// copies its send into recv, then runs P−1 reduce-scatter stages and P−1
// all-gather stages. Stage t sends one block to the right neighbour and
// receives one from the left:
//
//	reduce-scatter (t < P−1):  send block r−t,        receive block r−t−1 and reduce it in
//	all-gather     (u = t−P+1): send block r+1−u,      receive block r−u and copy it in
//
// so after the reduce-scatter stages rank r holds the complete block r+1,
// which the all-gather stages pass around. Each block is cut into S
// segments of at most seg elements (S from the largest block, so every
// rank cuts alike). Every element of a block is reduced once, in ring
// order, on one rank, and then only copied, so every rank ends with the
// same bits.
func RingAllReduce(P, r, n, seg int) Schedule {
	_, maxBlock := BlockRange(n, P, 0)
	S := Segments(maxBlock, seg)
	b := newBuilder(1 + 4*(P-1)*S + S)
	start := b.local(recvLane, -1, whole(RecvBuf, n), whole(SendBuf, n), Copy, false)
	if P == 1 {
		return b.done()
	}
	segment := func(block, s int) Range {
		off, ln := BlockRange(n, P, block)
		so, sl := BlockRange(ln, S, s)
		return Range{Buf: RecvBuf, Off: off + so, Len: sl}
	}
	sendBlock := func(t int) int {
		if t < P-1 {
			return mod(r-t, P)
		}
		return mod(r+1-(t-P+1), P)
	}
	recvBlock := func(t int) int {
		if t < P-1 {
			return mod(r-t-1, P)
		}
		return mod(r-(t-P+1), P)
	}
	stages := 2 * (P - 1)
	left, right := mod(r-1, P), mod(r+1, P)
	handled := make([]int, stages*S)
	for t := range stages {
		for s := range S {
			dst := segment(recvBlock(t), s)
			op := Reduce
			if t >= P-1 {
				op = Copy
			}
			i := b.recv(recvLane, -1, left, uint32(t*S+s), dst, op)
			if t == P-2 {
				i = b.finish(recvLane, dst)
			}
			handled[t*S+s] = i
		}
	}
	for t := range stages {
		for s := range S {
			after := start
			if t > 0 {
				after = handled[(t-1)*S+s]
			}
			b.send(sendLane, after, right, uint32(t*S+s), segment(sendBlock(t), s))
		}
	}
	return b.done()
}

// RingReduceScatter gives rank r block r (n elements, recv) of the
// reduction of every rank's send (P blocks of n elements), in P−1 stages.
// At stage t rank r passes the partial reduction of block r−t−1 to the
// right and receives the partial of block r−t−2 from the left, adds its own
// part of that block, and passes it on at the next stage; at the last stage
// the block that arrives is r itself, now complete:
//
//	stage t:  send partial(r−t−1) → r+1,   receive partial(r−t−2) ← r−1
//
// Partials travel in temp slots that a runtime fills by adopting the
// received frames, reduced in place, so the schedule needs no scratch
// memory and never writes send. Blocks are cut into segments and pipelined
// like RingAllReduce; a block of one segment has nothing to pipeline and
// takes one lane.
func RingReduceScatter(P, r, n, seg int) Schedule {
	S := Segments(n, seg)
	b := newBuilder(3*(P-1)*S + 2*S)
	if P == 1 {
		b.local(recvLane, -1, whole(RecvBuf, n), whole(SendBuf, n), Copy, false)
		b.finish(recvLane, whole(RecvBuf, n))
		return b.done()
	}
	left, right := mod(r-1, P), mod(r+1, P)
	part := func(buf Buf, block, s int) Range {
		so, sl := BlockRange(n, S, s)
		return Range{Buf: buf, Off: block*n + so, Len: sl}
	}
	if S == 1 {
		// Nothing to pipeline: one lane, in the order the stages take
		// (send, then receive, reduce and pass on), so a small call runs
		// on the caller's goroutine alone.
		b.send(recvLane, -1, right, 0, part(SendBuf, mod(r-1, P), 0))
		for t := range P - 1 {
			k := b.temp(n)
			tmp := Range{Buf: TempBuf, Slot: k, Len: n}
			b.recv(recvLane, -1, left, uint32(t), tmp, Copy)
			b.local(recvLane, -1, tmp, part(SendBuf, mod(r-t-2, P), 0), Reduce, false)
			if t == P-2 {
				dst := whole(RecvBuf, n)
				b.local(recvLane, -1, dst, tmp, Copy, true)
				b.finish(recvLane, dst)
				break
			}
			i := b.send(recvLane, -1, right, uint32(t+1), tmp)
			b.s.Steps[i].Free = true
		}
		return b.done()
	}
	handled := make([]int, (P-1)*S)
	slots := make([]int, (P-1)*S)
	for t := range P - 1 {
		blk := mod(r-t-2, P)
		for s := range S {
			_, sl := BlockRange(n, S, s)
			k := b.temp(sl)
			slots[t*S+s] = k
			tmp := Range{Buf: TempBuf, Slot: k, Len: sl}
			b.recv(recvLane, -1, left, uint32(t*S+s), tmp, Copy)
			i := b.local(recvLane, -1, tmp, part(SendBuf, blk, s), Reduce, false)
			if t == P-2 {
				dst := part(RecvBuf, 0, s)
				b.local(recvLane, -1, dst, tmp, Copy, true)
				i = b.finish(recvLane, dst)
			}
			handled[t*S+s] = i
		}
	}
	for t := range P - 1 {
		for s := range S {
			if t == 0 {
				b.send(sendLane, -1, right, uint32(s), part(SendBuf, mod(r-1, P), s))
				continue
			}
			k := slots[(t-1)*S+s]
			i := b.send(sendLane, handled[(t-1)*S+s], right, uint32(t*S+s), Range{Buf: TempBuf, Slot: k, Len: b.s.Temps[k]})
			b.s.Steps[i].Free = true
		}
	}
	return b.done()
}

// RingAllGather fills recv (P blocks of n elements) with every rank's send
// (n elements), in P−1 stages after rank r has copied its own send into
// block r: at stage t rank r sends block r−t to the right and receives
// block r−t−1 from the left, each block cut into segments and pipelined
// (segment s of stage t leaves once segment s of stage t−1 has arrived);
// a block of one segment has nothing to pipeline and takes one lane.
func RingAllGather(P, r, n, seg int) Schedule {
	S := Segments(n, seg)
	b := newBuilder(1 + 2*(P-1)*S)
	start := b.local(recvLane, -1, Range{Buf: RecvBuf, Off: r * n, Len: n}, whole(SendBuf, n), Copy, false)
	if P == 1 {
		return b.done()
	}
	left, right := mod(r-1, P), mod(r+1, P)
	part := func(block, s int) Range {
		so, sl := BlockRange(n, S, s)
		return Range{Buf: RecvBuf, Off: block*n + so, Len: sl}
	}
	if S == 1 {
		// Nothing to pipeline: one lane, stage by stage (send block r−t,
		// then receive block r−t−1), so a small call runs on the
		// caller's goroutine alone.
		for t := range P - 1 {
			b.send(recvLane, -1, right, uint32(t), part(mod(r-t, P), 0))
			b.recv(recvLane, -1, left, uint32(t), part(mod(r-t-1, P), 0), Copy)
		}
		return b.done()
	}
	handled := make([]int, (P-1)*S)
	for t := range P - 1 {
		for s := range S {
			handled[t*S+s] = b.recv(recvLane, -1, left, uint32(t*S+s), part(mod(r-t-1, P), s), Copy)
		}
	}
	for t := range P - 1 {
		for s := range S {
			after := start
			if t > 0 {
				after = handled[(t-1)*S+s]
			}
			b.send(sendLane, after, right, uint32(t*S+s), part(mod(r-t, P), s))
		}
	}
	return b.done()
}
