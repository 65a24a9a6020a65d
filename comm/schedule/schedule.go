// Package schedule holds hiercomm's collective algorithms as data: each
// algorithm is a pure function of (world size, rank, counts, segment size)
// that returns this rank's Schedule — the list of steps (send this range to
// that peer, receive that frame into this range and reduce or copy it, …)
// that a runtime executes over its transport. Nothing here does I/O, reads a
// clock or touches a buffer: the same schedule is checked by a symbolic
// simulator in this package's tests (every world 1–64, uneven counts, no
// deadlock, every element reduced once), run by nexar over QUIC, TCP and
// memory, and simulated at scale by the bench.
//
// The one α-β cost model that picks among the schedules (CostModel) lives
// here too, so every tier and every rank chooses the same way.
//
// schedule imports nothing of hiercomm but comm (and today not even that);
// it must never import a transport.
package schedule

import "fmt"

// Buf names one of the buffers a step reads or writes.
type Buf uint8

const (
	// SendBuf is the caller's send buffer. Schedules never write it.
	SendBuf Buf = iota + 1
	// RecvBuf is the caller's receive buffer.
	RecvBuf
	// TempBuf is a scratch slot of the runtime, Range.Slot of
	// Schedule.Temps. A slot comes into being when a step first writes it
	// (a receive with Copy into a whole slot may simply adopt the frame's
	// payload, with no copy) and ends at a step with Free set on it, or when
	// the schedule ends.
	TempBuf
)

// Range is a run of elements of one buffer: elements [Off, Off+Len) of
// Buf (of slot Slot when Buf is TempBuf). Ranges are in elements of the
// call's dtype; the runtime multiplies by the element size.
type Range struct {
	Buf      Buf
	Slot     int
	Off, Len int
}

func (r Range) String() string {
	name := map[Buf]string{SendBuf: "send", RecvBuf: "recv", TempBuf: fmt.Sprintf("temp%d", r.Slot)}[r.Buf]
	return fmt.Sprintf("%s[%d:%d]", name, r.Off, r.Off+r.Len)
}

// Kind is what a step does.
type Kind uint8

const (
	// Send sends Src to Peer as frame Tag. Sends never wait for the
	// receiver (the transport buffers), so a Send only waits for its lane
	// and its After.
	Send Kind = iota + 1
	// Recv waits for frame Tag from Peer, which must hold exactly Dst.Len
	// elements, and combines it into Dst by Op.
	Recv
	// Local combines Src into Dst by Op, on this rank.
	Local
	// Finish completes an Avg on Dst: the runtime divides it by the world
	// size when the op is Avg and does nothing otherwise. Every element of
	// a reduced result is finished exactly once, after its last reduction.
	Finish
	// Identity fills Dst with the op's identity (ExScan's rank 0).
	Identity
)

// Op is how data arriving at Dst is combined with what Dst holds.
type Op uint8

const (
	// Copy: Dst = x.
	Copy Op = iota
	// Reduce: Dst = Dst ⊕ x.
	Reduce
	// ReduceFirst: Dst = x ⊕ Dst, for when x holds the lower ranks' part,
	// so that both partners of an exchange compute the same bits.
	ReduceFirst
)

// Step is one action of one rank. Steps of one Lane run in the order they
// have in Schedule.Steps; lanes run at once (a runtime gives each its goroutine), which is how a
// schedule overlaps sending, receiving and reducing. After orders a step
// behind a step of another lane, by index into Schedule.Steps (-1: none):
// a pipelined ring's Send of segment s at stage t waits for the Recv that
// brought segment s of stage t−1.
type Step struct {
	Kind  Kind
	Lane  int
	After int
	Peer  int
	// Tag names the frame; it is unique among the frames from one rank to
	// another within one collective.
	Tag      uint32
	Src, Dst Range
	Op       Op
	// Free ends Src's temp slot after this step; the step may then consume
	// the slot's contents (send its memory, use it as scratch).
	Free bool
	// Announce (AllToAllV) makes a Send tell the receiver its element count,
	// Src.Len, and a Recv check that the count it is told is Dst.Len, so
	// that disagreeing counts are reported as a mismatch naming both.
	Announce bool
}

// Schedule is one rank's part of a collective.
type Schedule struct {
	Steps []Step
	// Lanes is the number of lanes the steps use (0 … Lanes−1). A runtime
	// may run a one-lane schedule inline, without any goroutine.
	Lanes int
	// Temps is the length in elements of each temp slot.
	Temps []int
	// Waited[l] says whether some step of another lane waits for a step of
	// lane l (a runtime then signals lane l's progress). At most one other
	// lane waits for any one lane, and its waits are in increasing order.
	Waited []bool
}

// builder accumulates the steps of one rank's schedule.
type builder struct {
	s Schedule
}

// newBuilder is a builder with room for about steps steps, so that a
// schedule costs one allocation for its steps.
func newBuilder(steps int) builder {
	return builder{s: Schedule{Steps: make([]Step, 0, steps)}}
}

func (b *builder) add(st Step) int {
	b.s.Lanes = max(b.s.Lanes, st.Lane+1)
	if st.After >= 0 {
		w := b.s.Steps[st.After].Lane
		for len(b.s.Waited) <= w {
			b.s.Waited = append(b.s.Waited, false)
		}
		b.s.Waited[w] = true
	}
	b.s.Steps = append(b.s.Steps, st)
	return len(b.s.Steps) - 1
}

func (b *builder) send(lane, after, peer int, tag uint32, src Range) int {
	return b.add(Step{Kind: Send, Lane: lane, After: after, Peer: peer, Tag: tag, Src: src})
}

func (b *builder) recv(lane, after, peer int, tag uint32, dst Range, op Op) int {
	return b.add(Step{Kind: Recv, Lane: lane, After: after, Peer: peer, Tag: tag, Dst: dst, Op: op})
}

func (b *builder) local(lane, after int, dst, src Range, op Op, free bool) int {
	return b.add(Step{Kind: Local, Lane: lane, After: after, Dst: dst, Src: src, Op: op, Free: free})
}

func (b *builder) finish(lane int, dst Range) int {
	return b.add(Step{Kind: Finish, Lane: lane, After: -1, Dst: dst})
}

func (b *builder) temp(n int) int {
	b.s.Temps = append(b.s.Temps, n)
	return len(b.s.Temps) - 1
}

func (b *builder) done() Schedule {
	for len(b.s.Waited) < b.s.Lanes {
		b.s.Waited = append(b.s.Waited, false)
	}
	return b.s
}

// sendMsg sends src to peer as a message: frames of at most seg elements
// (one empty frame when src is empty), tagged tag0, tag0+1, …. It returns
// the index of the last step.
func (b *builder) sendMsg(lane, after, peer int, tag0 uint32, src Range, seg int) int {
	last := -1
	for i := range Segments(src.Len, seg) {
		o, l := pieceRange(src.Len, seg, i)
		last = b.send(lane, after, peer, tag0+uint32(i), Range{Buf: src.Buf, Slot: src.Slot, Off: src.Off + o, Len: l})
		after = -1
	}
	return last
}

// recvMsg receives a message sent by sendMsg into dst, combining each frame
// by op, and returns the index of the last step.
func (b *builder) recvMsg(lane, after, peer int, tag0 uint32, dst Range, seg int, op Op) int {
	last := -1
	for i := range Segments(dst.Len, seg) {
		o, l := pieceRange(dst.Len, seg, i)
		last = b.recv(lane, after, peer, tag0+uint32(i), Range{Buf: dst.Buf, Slot: dst.Slot, Off: dst.Off + o, Len: l}, op)
		after = -1
	}
	return last
}

// whole is the range of all n elements of buf.
func whole(buf Buf, n int) Range { return Range{Buf: buf, Len: n} }
