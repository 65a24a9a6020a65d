package shm

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// The point-to-point engine: one goroutine per communicator, running while
// a Send or Recv is pending. Each round it drains every ring to this rank
// (matching messages to Recvs, or keeping them as unexpected), fills the
// rings to the destinations of pending Sends, and ends what a context or a
// failed peer ended; when a round moves nothing, it waits like the step
// protocol does, on this rank's p2p bell.

// minFrame is the smallest payload worth a frame while more is to come.
const minFrame = 512

func (e *p2pEngine) loop() {
	c := e.c
	defer c.users.Done()
	idle := 0
	var start time.Time
	sleep := sleepMin
	for round := 1; ; round++ {
		bell := atomic.LoadUint32(c.mine.p2pBell) // before the round: a change after it cuts the sleep short
		e.mu.Lock()
		if e.sendsPending() == 0 && e.nrecv == 0 {
			e.running = false
			e.mu.Unlock()
			return
		}
		moved := e.roundLocked()
		now := time.Now()
		var failure error
		if !moved && idle >= c.spin || round%64 == 0 {
			failure = e.expireLocked(now) // also while data keeps moving, now and then
		}
		e.mu.Unlock()
		if failure != nil {
			c.abort(failure) // fails every pending operation (see fail)
			continue
		}
		if moved {
			idle, sleep = 0, sleepMin
			continue
		}
		idle++
		switch {
		case c.killed.Load():
			e.fail(errKilled)
		case idle < c.spin:
		case idle == c.spin:
			start = now
		case now.Sub(start) < c.p2pYield:
			c.yield()
		default:
			c.sleepOn(c.mine.p2pBell, c.mine.p2pSleepers, sleep, func() bool { return atomic.LoadUint32(c.mine.p2pBell) != bell })
			sleep = min(2*sleep, sleepMax)
		}
	}
}

// roundLocked moves what it can and reports whether anything moved.
func (e *p2pEngine) roundLocked() bool {
	if e.c.killed.Load() {
		return false
	}
	moved := false
	for q := range e.c.size {
		if q != e.c.rank && e.drainLocked(q) {
			moved = true
		}
	}
	for q, queue := range e.sends {
		if len(queue) > 0 && e.fillLocked(q) {
			moved = true
			chime(e.c.words[q].p2pBell, e.c.words[q].p2pSleepers)
		}
	}
	return moved
}

// drainLocked consumes every frame in the ring from src and, when it
// consumed any, rings src's bell: there is room in its ring again.
func (e *p2pEngine) drainLocked(src int) bool {
	r := e.in[src]
	moved := false
	for {
		f, p1, p2, ok := r.next()
		if !ok {
			if moved {
				chime(e.c.words[src].p2pBell, e.c.words[src].p2pSleepers)
			}
			return moved
		}
		moved = true
		switch f.kind {
		case frameBegin:
			e.beginLocked(src, f)
			e.payloadLocked(src, p1, p2)
		case frameData:
			e.payloadLocked(src, p1, p2)
		case frameCancel:
			e.cancelInboundLocked(src)
		}
		r.consume(f)
	}
}

// beginLocked starts a message from src: into the oldest Recv waiting for
// it, or as an unexpected message.
func (e *p2pEngine) beginLocked(src int, f frame) {
	dt := comm.DType(f.dtype)
	m := &message{src: src, tag: int(f.tag), dtype: dt, count: f.count, size: int(f.count) * dt.Size()}
	e.inbound[src] = m
	k := p2pKey{src, m.tag}
	if rs := e.recvs[k]; len(rs) > 0 {
		r := rs[0]
		e.popRecv(k)
		m.data = []byte{}
		e.matchLocked(r, m) // completes it at once when it is empty
		if m.done() {
			e.inbound[src] = nil
		}
		return
	}
	m.data = make([]byte, m.size)
	e.unexpected[k] = append(e.unexpected[k], m)
	if m.done() {
		e.inbound[src] = nil
	}
}

func (e *p2pEngine) popRecv(k p2pKey) {
	if rs := e.recvs[k][1:]; len(rs) > 0 {
		e.recvs[k] = rs
	} else {
		delete(e.recvs, k)
	}
}

func (e *p2pEngine) payloadLocked(src int, p1, p2 []byte) {
	m := e.inbound[src]
	n := len(p1) + len(p2)
	if m == nil || n == 0 {
		return
	}
	if !m.discard {
		copy(m.data[m.got:], p1)
		copy(m.data[m.got+len(p1):], p2)
	}
	m.got += n
	if m.done() {
		e.completeLocked(src)
	}
}

// completeLocked ends the message from src, all of whose bytes are here.
func (e *p2pEngine) completeLocked(src int) {
	m := e.inbound[src]
	e.inbound[src] = nil
	switch {
	case m.recv != nil:
		m.recv.msg = nil
		e.finishRecv(m.recv, nil)
	case m.refused != nil:
		e.finishRecv(m.refused, mismatch(m.refused, m))
	}
}

// cancelInboundLocked drops the message from src whose Send was cancelled
// part way; a Recv it was arriving into waits for the next message.
func (e *p2pEngine) cancelInboundLocked(src int) {
	m := e.inbound[src]
	e.inbound[src] = nil
	if m == nil {
		return
	}
	k := p2pKey{src, m.tag}
	r := m.recv
	if r == nil {
		r = m.refused
	}
	if r != nil {
		r.msg = nil
		e.recvs[k] = append([]*recvOp{r}, e.recvs[k]...)
		return
	}
	if i := slices.Index(e.unexpected[k], m); i >= 0 {
		e.unexpected[k] = slices.Delete(e.unexpected[k], i, i+1)
		if len(e.unexpected[k]) == 0 {
			delete(e.unexpected, k)
		}
	}
}

// fillLocked writes as much of the pending Sends to dst as the ring takes.
func (e *p2pEngine) fillLocked(dst int) bool {
	r := e.out[dst]
	moved := false
	for len(e.sends[dst]) > 0 {
		s := e.sends[dst][0]
		room := r.room()
		if s.cancel {
			if room < 0 {
				return moved
			}
			r.put(frame{kind: frameCancel}, nil)
			e.sends[dst] = e.sends[dst][1:]
			moved = true
			continue
		}
		left := s.size - s.off
		n := min(left, r.maxPayload(), room)
		if room < 0 || n < min(left, minFrame) || s.begun && n == 0 {
			return moved
		}
		f := frame{kind: frameData}
		if !s.begun {
			f = beginFrame(s.tag, s.dtype, s.count)
			s.begun = true
		}
		r.put(f, s.data[s.off:s.off+n])
		s.off += n
		moved = true
		if s.off == s.size {
			e.sends[dst] = e.sends[dst][1:]
			e.finishSend(s, nil)
		}
	}
	return moved
}

// expireLocked ends the operations whose context ended, and those whose
// peer closed its communicator; it returns the failure of a peer that
// died, which aborts the communicator (the caller does it, unlocked).
func (e *p2pEngine) expireLocked(now time.Time) error {
	c := e.c
	check := c.due(e.watch, now)
	peerErr := func(q int) error {
		if q == c.rank {
			return nil
		}
		if err := c.peerState(q); err != nil {
			return err
		}
		if check {
			return c.checkPeer(e.watch, q, now)
		}
		return nil
	}
	for q, queue := range e.sends {
		kept := queue[:0]
		for _, s := range queue {
			if err := s.b.err(now); err != nil && !s.cancel {
				e.finishSend(s, err)
				if !s.begun {
					continue // never seen by the receiver
				}
				s.cancel = true
			}
			kept = append(kept, s)
		}
		e.sends[q] = kept
		if len(kept) > 0 {
			if err := peerErr(q); err != nil {
				return err
			}
		}
	}
	for k, rs := range e.recvs {
		kept := rs[:0]
		for _, r := range rs {
			if err := r.b.err(now); err != nil {
				e.finishRecv(r, err)
				continue
			}
			kept = append(kept, r)
		}
		if len(kept) == 0 {
			delete(e.recvs, k)
			continue
		}
		e.recvs[k] = kept
		if err := peerErr(k.peer); err != nil {
			return err
		}
	}
	for src, m := range e.inbound {
		if m == nil {
			continue
		}
		if r := m.refused; r != nil {
			if err := r.b.err(now); err != nil {
				m.refused = nil
				e.finishRecv(r, err)
			}
		}
		if m.recv == nil {
			continue
		}
		if r, err := m.recv, m.recv.b.err(now); err != nil {
			// The rest of the message keeps arriving, into memory of its
			// own, for the next Recv of its sender and tag: one already
			// waiting (older than any Recv to come, it must not be
			// overtaken), else a later one.
			data := make([]byte, m.size)
			copy(data, r.buf[:m.got])
			m.data, m.recv, r.msg = data, nil, nil
			k := p2pKey{src, m.tag}
			e.finishRecv(r, err)
			if rs := e.recvs[k]; len(rs) > 0 {
				next := rs[0]
				e.popRecv(k)
				e.matchLocked(next, m)
			} else {
				e.unexpected[k] = append([]*message{m}, e.unexpected[k]...)
			}
			continue
		}
		if err := peerErr(src); err != nil {
			return err
		}
	}
	return nil
}

// fail ends every pending operation with err, and every later one (close
// and abort).
func (e *p2pEngine) fail(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed == nil {
		e.failed = err
	}
	for q, queue := range e.sends {
		for _, s := range queue {
			e.finishSend(s, err)
		}
		e.sends[q] = nil
	}
	for k, rs := range e.recvs {
		for _, r := range rs {
			e.finishRecv(r, err)
		}
		delete(e.recvs, k)
	}
	for src, m := range e.inbound {
		if m != nil && m.recv != nil {
			e.finishRecv(m.recv, err)
		}
		if m != nil && m.refused != nil {
			e.finishRecv(m.refused, err)
		}
		e.inbound[src] = nil
	}
	if !e.c.killed.Load() {
		chime(e.c.mine.p2pBell, e.c.mine.p2pSleepers)
	}
}

func (e *p2pEngine) close() { e.fail(comm.ErrClosed) }
