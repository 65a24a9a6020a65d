package schedule

import (
	"fmt"
	"strings"
)

// The simulator runs the schedules of all ranks of a world against each
// other without I/O, symbolically: each element of every buffer is a val
// saying which element of the logical vector it is, which ranks'
// contributions it holds, whether Avg was finished on it, and a hash of the
// expression that computed it (equal hashes: equal bits on every rank).
// Frames are delivered eagerly (a Send never waits, as over nexar's
// transports); a Recv waits for its frame, a step for its After. A world
// whose ranks can no longer move while steps remain is a deadlock.

type val struct {
	ok    bool   // defined: something wrote it
	idx   int    // which element of the logical vector
	mask  uint64 // the ranks whose contribution it holds
	fin   bool   // Avg was finished on it
	ident bool   // the op's identity (ExScan's rank 0)
	h     uint64 // hash of the expression that computed it
}

func leaf(rank, idx int) val {
	return val{ok: true, idx: idx, mask: 1 << rank, h: mix(uint64(rank)+1, uint64(idx)+1, 0)}
}

func mix(a, b, c uint64) uint64 {
	h := uint64(14695981039346656037)
	for _, x := range [3]uint64{a, b, c} {
		h ^= x
		h *= 1099511628211
		h ^= h >> 29
	}
	return h
}

// combine is a ⊕ b, in that order.
func combine(a, b val) (val, error) {
	switch {
	case !a.ok || !b.ok:
		return val{}, fmt.Errorf("reduces an undefined element")
	case a.idx != b.idx:
		return val{}, fmt.Errorf("reduces element %d with element %d", a.idx, b.idx)
	case a.mask&b.mask != 0:
		return val{}, fmt.Errorf("element %d: contributions %b reduced twice", a.idx, a.mask&b.mask)
	case a.fin || b.fin:
		return val{}, fmt.Errorf("element %d reduced after its Avg was finished", a.idx)
	case a.ident || b.ident:
		return val{}, fmt.Errorf("element %d: identity reduced", a.idx)
	}
	return val{ok: true, idx: a.idx, mask: a.mask | b.mask, h: mix(7, a.h, b.h)}, nil
}

type msgKey struct {
	src, dst int
	tag      uint32
}

type message struct {
	data     []val
	know     uint64 // ranks the sender had heard from (itself included) when it sent
	announce bool
}

type simRank struct {
	sched       Schedule
	send, recv  []val
	temps       [][]val
	live        []bool
	pos         []int   // per lane: index into lanes[l] of the next step
	lanes       [][]int // per lane: its steps' indices, in order
	done        []bool
	know        uint64
	finishSteps int
}

type world struct {
	P     int
	ranks []*simRank
	inbox map[msgKey]message
	used  map[msgKey]bool
	sent  int
}

// simulate runs one schedule per rank (sched(r)) from the given initial
// buffers and returns the ranks' final state.
func simulate(P int, sched func(r int) Schedule, send, recv func(r int) []val) (*world, error) {
	w := &world{P: P, inbox: map[msgKey]message{}, used: map[msgKey]bool{}}
	for r := range P {
		s := sched(r)
		if err := s.Check(); err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
		sr := &simRank{sched: s, send: send(r), recv: recv(r), temps: make([][]val, len(s.Temps)),
			live: make([]bool, len(s.Temps)), pos: make([]int, s.Lanes), lanes: make([][]int, s.Lanes),
			done: make([]bool, len(s.Steps)), know: 1 << r}
		for i, st := range s.Steps {
			sr.lanes[st.Lane] = append(sr.lanes[st.Lane], i)
		}
		w.ranks = append(w.ranks, sr)
	}
	for {
		moved := false
		for r, sr := range w.ranks {
			for l := range sr.lanes {
				for sr.pos[l] < len(sr.lanes[l]) {
					i := sr.lanes[l][sr.pos[l]]
					ran, err := w.step(r, i)
					if err != nil {
						return nil, fmt.Errorf("rank %d step %d (%s): %w", r, i, describe(sr.sched.Steps[i]), err)
					}
					if !ran {
						break
					}
					sr.done[i] = true
					sr.pos[l]++
					moved = true
				}
			}
		}
		if !moved {
			break
		}
	}
	var stuck []string
	for r, sr := range w.ranks {
		for l := range sr.lanes {
			if sr.pos[l] < len(sr.lanes[l]) {
				i := sr.lanes[l][sr.pos[l]]
				stuck = append(stuck, fmt.Sprintf("rank %d lane %d waits at step %d (%s)", r, l, i, describe(sr.sched.Steps[i])))
			}
		}
	}
	if len(stuck) > 0 {
		return nil, fmt.Errorf("deadlock: %s", strings.Join(stuck, "; "))
	}
	if len(w.inbox) > 0 {
		for k := range w.inbox {
			return nil, fmt.Errorf("frame %d from rank %d to rank %d was never received", k.tag, k.src, k.dst)
		}
	}
	return w, nil
}

func describe(st Step) string {
	switch st.Kind {
	case Send:
		return fmt.Sprintf("send %v to %d tag %d", st.Src, st.Peer, st.Tag)
	case Recv:
		return fmt.Sprintf("recv %v from %d tag %d op %d", st.Dst, st.Peer, st.Tag, st.Op)
	case Local:
		return fmt.Sprintf("local %v op %d ← %v", st.Dst, st.Op, st.Src)
	case Finish:
		return fmt.Sprintf("finish %v", st.Dst)
	case Identity:
		return fmt.Sprintf("identity %v", st.Dst)
	}
	return fmt.Sprintf("kind %d", st.Kind)
}

func (w *world) buf(r int, rg Range, write bool) ([]val, error) {
	sr := w.ranks[r]
	var b []val
	switch rg.Buf {
	case SendBuf:
		if write {
			return nil, fmt.Errorf("writes the send buffer")
		}
		b = sr.send
	case RecvBuf:
		b = sr.recv
	case TempBuf:
		if rg.Slot < 0 || rg.Slot >= len(sr.temps) {
			return nil, fmt.Errorf("temp slot %d of %d", rg.Slot, len(sr.temps))
		}
		if !sr.live[rg.Slot] {
			if !write {
				return nil, fmt.Errorf("reads temp slot %d, which is not live", rg.Slot)
			}
			sr.temps[rg.Slot] = make([]val, sr.sched.Temps[rg.Slot])
			sr.live[rg.Slot] = true
		}
		b = sr.temps[rg.Slot]
	default:
		return nil, fmt.Errorf("buffer %d", rg.Buf)
	}
	if rg.Off < 0 || rg.Len < 0 || rg.Off+rg.Len > len(b) {
		return nil, fmt.Errorf("%v is outside its buffer of %d", rg, len(b))
	}
	return b[rg.Off : rg.Off+rg.Len], nil
}

func apply(dst, src []val, op Op) error {
	for i := range dst {
		x := src[i]
		if !x.ok {
			return fmt.Errorf("uses undefined element %d of its source", i)
		}
		var err error
		switch op {
		case Copy:
			dst[i] = x
		case Reduce:
			dst[i], err = combine(dst[i], x)
		case ReduceFirst:
			dst[i], err = combine(x, dst[i])
		default:
			err = fmt.Errorf("op %d", op)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// step runs step i of rank r if it can run now.
func (w *world) step(r, i int) (bool, error) {
	sr := w.ranks[r]
	st := sr.sched.Steps[i]
	if st.After >= 0 && !sr.done[st.After] {
		return false, nil
	}
	switch st.Kind {
	case Send:
		if st.Peer < 0 || st.Peer >= w.P || st.Peer == r {
			return false, fmt.Errorf("peer %d", st.Peer)
		}
		src, err := w.buf(r, st.Src, false)
		if err != nil {
			return false, err
		}
		for j, x := range src {
			if !x.ok {
				return false, fmt.Errorf("sends undefined element %d", j)
			}
		}
		k := msgKey{r, st.Peer, st.Tag}
		if w.used[k] {
			return false, fmt.Errorf("tag %d to rank %d used twice", st.Tag, st.Peer)
		}
		w.used[k] = true
		w.inbox[k] = message{data: append([]val(nil), src...), know: sr.know, announce: st.Announce}
		w.sent++
	case Recv:
		k := msgKey{st.Peer, r, st.Tag}
		m, ok := w.inbox[k]
		if !ok {
			return false, nil
		}
		delete(w.inbox, k)
		dst, err := w.buf(r, st.Dst, true)
		if err != nil {
			return false, err
		}
		if len(m.data) != len(dst) {
			return false, fmt.Errorf("frame of %d elements into %d", len(m.data), len(dst))
		}
		if m.announce != st.Announce {
			return false, fmt.Errorf("announce %v meets %v", m.announce, st.Announce)
		}
		if err := apply(dst, m.data, st.Op); err != nil {
			return false, err
		}
		sr.know |= m.know
	case Local:
		src, err := w.buf(r, st.Src, false)
		if err != nil {
			return false, err
		}
		dst, err := w.buf(r, st.Dst, true)
		if err != nil {
			return false, err
		}
		if len(src) != len(dst) {
			return false, fmt.Errorf("%v into %v", st.Src, st.Dst)
		}
		if err := apply(dst, append([]val(nil), src...), st.Op); err != nil {
			return false, err
		}
	case Finish:
		dst, err := w.buf(r, st.Dst, true)
		if err != nil {
			return false, err
		}
		for j := range dst {
			x := &dst[j]
			switch {
			case !x.ok:
				return false, fmt.Errorf("finishes undefined element %d", j)
			case x.fin:
				return false, fmt.Errorf("finishes element %d twice", x.idx)
			case x.mask != fullMask(w.P):
				return false, fmt.Errorf("finishes element %d holding only %b", x.idx, x.mask)
			}
			x.fin = true
			x.h = mix(11, x.h, 0)
		}
		sr.finishSteps++
	case Identity:
		dst, err := w.buf(r, st.Dst, true)
		if err != nil {
			return false, err
		}
		for j := range dst {
			dst[j] = val{ok: true, idx: -1, ident: true, h: 13}
		}
	default:
		return false, fmt.Errorf("kind %d", st.Kind)
	}
	if st.Free {
		if st.Src.Buf != TempBuf {
			return false, fmt.Errorf("frees %v, not a temp slot", st.Src)
		}
		sr.live[st.Src.Slot] = false
		sr.temps[st.Src.Slot] = nil
	}
	return true, nil
}

func fullMask(P int) uint64 {
	if P == 64 {
		return ^uint64(0)
	}
	return 1<<P - 1
}
