package shm

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// Send and Recv. Each rank sends to each other rank through a ring of its
// own (ring.go); messages to one rank go in the order their Sends were
// started, so messages with one tag are received in order (MPI's
// non-overtaking rule). The receiving side matches a message to the oldest
// Recv posted for its sender and tag; a message no Recv waits for is
// drained into memory of its own (unexpected), so a rank blocked sending
// never stops the rank it sends to from sending to it: two ranks can Send
// to each other before either Recvs. A Send is done once its message is
// all in the ring (or, to itself, copied).
//
// One engine goroutine per communicator moves the frames while any Send or
// Recv is pending, sleeping on this rank's p2p bell, which peers ring when
// they fill a ring to it or drain one from it.

type p2pKey struct{ peer, tag int }

type sendOp struct {
	b      bound // the caller's context and Config.Timeout
	work   *comm.Work
	peer   int
	tag    int
	dtype  comm.DType
	count  int
	data   []byte // nil once the Work is done early (the buffer is the caller's again)
	size   int
	off    int  // bytes in the ring so far
	begun  bool // the begin frame is in the ring
	cancel bool // the Work ended early; a cancel frame is owed
}

type recvOp struct {
	b     bound // the caller's context and Config.Timeout
	work  *comm.Work
	peer  int
	tag   int
	dtype comm.DType
	count int
	buf   []byte
	msg   *message // the message arriving into buf
}

// message is one arriving (or arrived) message.
type message struct {
	src, tag int
	dtype    comm.DType
	count    int64
	size     int     // bytes
	data     []byte  // the matched Recv's buffer, or memory of its own; nil when discarded
	got      int     // bytes so far
	recv     *recvOp // the Recv it is matched to; nil while unexpected
	// refused is the Recv it was matched to but does not fit: its bytes
	// are dropped, and the Recv fails with a mismatch once they are all
	// here (or gets the next message, if the Send is cancelled part way).
	refused *recvOp
	discard bool // its bytes are dropped
}

func (m *message) done() bool { return m.got == m.size }

type p2pEngine struct {
	c     *Comm
	out   []ring // by destination
	in    []ring // by source
	watch *watch // owned by the engine goroutine

	mu         sync.Mutex // guards the fields below
	sends      [][]*sendOp
	recvs      map[p2pKey][]*recvOp
	unexpected map[p2pKey][]*message
	inbound    []*message // by source: the message whose frames are coming
	nrecv      int        // Recvs not done
	running    bool
	failed     error // set by close or abort: every pending and later operation fails with it
}

func newP2P(c *Comm) *p2pEngine {
	e := &p2pEngine{c: c, watch: newWatch(c.size),
		out: make([]ring, c.size), in: make([]ring, c.size),
		sends: make([][]*sendOp, c.size), inbound: make([]*message, c.size),
		recvs: map[p2pKey][]*recvOp{}, unexpected: map[p2pKey][]*message{}}
	for q := range c.size {
		e.out[q] = c.ringBetween(c.rank, q)
		e.in[q] = c.ringBetween(q, c.rank)
	}
	return e
}

func (e *p2pEngine) opError(call comm.Call, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		err = tier.ContextError(err)
	}
	peer := call.Peer
	if p := comm.PeerOf(err); p >= 0 {
		peer = p
	}
	return &comm.OpError{Rank: e.c.rank, Peer: peer, Kind: call.Kind, Comm: e.c.name, Err: err}
}

// start begins a Send or Recv.
func (e *p2pEngine) start(ctx context.Context, call comm.Call) *comm.Work {
	c := e.c
	if _, err := c.checks.Check(ctx, call, c.rank, c.size); err != nil {
		return comm.Failed(e.opError(call, err))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed != nil {
		return comm.Failed(e.opError(call, e.failed))
	}
	// A Send with nothing queued before it, or a Recv, may be done on
	// this goroutine at once.
	if call.Peer != c.rank && (call.Kind == comm.KindRecv || len(e.sends[call.Peer]) == 0) {
		if err := ctx.Err(); err != nil {
			return comm.Failed(e.opError(call, err))
		}
		var done bool
		var err error
		if call.Kind == comm.KindSend {
			done = e.sendNowLocked(call)
		} else {
			done, err = e.recvNowLocked(call)
		}
		switch {
		case done && err != nil:
			return comm.Failed(e.opError(call, err))
		case done:
			return comm.Succeeded()
		}
	}
	w := comm.NewWork()
	if call.Kind == comm.KindSend {
		b := call.Send
		if call.Peer == c.rank {
			e.deliverSelfLocked(call)
			w.Complete(nil)
			return w
		}
		e.sends[call.Peer] = append(e.sends[call.Peer], &sendOp{b: c.boundFor(ctx), work: w, peer: call.Peer, tag: call.Tag,
			dtype: b.DType(), count: b.Len(), data: b.Bytes(), size: b.ByteLen()})
	} else {
		b := call.Recv
		r := &recvOp{b: c.boundFor(ctx), work: w, peer: call.Peer, tag: call.Tag, dtype: b.DType(), count: b.Len(), buf: b.Bytes()}
		e.nrecv++
		if !e.matchUnexpectedLocked(r) {
			k := p2pKey{r.peer, r.tag}
			e.recvs[k] = append(e.recvs[k], r)
		}
	}
	e.wakeLocked()
	return w
}

// sendNowLocked writes a Send whole into the ring to its peer, on the
// caller's goroutine, when nothing is queued before it and one frame of
// the ring's room holds it; it reports false, having written nothing,
// otherwise (the engine then sends it). A small message so needs neither
// the engine nor a Work. Like the engine's, such a Send is done once its
// message is in the ring, whatever its peer does next.
func (e *p2pEngine) sendNowLocked(call comm.Call) bool {
	if e.c.killed.Load() {
		return false
	}
	r, b := e.out[call.Peer], call.Send
	n := b.ByteLen()
	if room := r.room(); room < 0 || n > min(room, r.maxPayload()) {
		return false
	}
	r.put(beginFrame(call.Tag, b.DType(), b.Len()), b.Bytes())
	chime(e.c.words[call.Peer].p2pBell, e.c.words[call.Peer].p2pSleepers)
	return true
}

// recvNowLocked takes a Recv's message on the caller's goroutine when it
// is already whole here: it drains the ring from the peer (as the engine
// would), and if the oldest message of the Recv's sender and tag is then
// complete and unclaimed, copies it into the buffer (or refuses it, when
// it does not fit) and reports done. Otherwise it reports false and the
// Recv is posted as usual. No older Recv of the same sender and tag can be
// waiting when such a message is unclaimed, so none is overtaken.
func (e *p2pEngine) recvNowLocked(call comm.Call) (bool, error) {
	if e.c.killed.Load() {
		return false, nil
	}
	e.drainLocked(call.Peer)
	k := p2pKey{call.Peer, call.Tag}
	if ms := e.unexpected[k]; len(ms) == 0 || !ms[0].done() {
		return false, nil
	}
	m := e.popUnexpectedLocked(k)
	b := call.Recv
	if r := (&recvOp{peer: call.Peer, dtype: b.DType(), count: b.Len()}); !fits(r, m) {
		return true, mismatch(r, m)
	}
	copy(b.Bytes(), m.data)
	return true, nil
}

// wakeLocked makes sure the engine runs and looks at its work again.
func (e *p2pEngine) wakeLocked() {
	if e.sendsPending() == 0 && e.nrecv == 0 {
		return
	}
	if !e.running {
		e.running = true
		e.c.users.Add(1)
		go e.loop()
		return
	}
	chime(e.c.mine.p2pBell, e.c.mine.p2pSleepers)
}

// chime bumps a bell and wakes its sleepers, if any.
func chime(bell, sleepers *uint32) {
	atomic.AddUint32(bell, 1)
	if atomic.LoadUint32(sleepers) != 0 {
		futexWakeAll(bell)
	}
}

func (e *p2pEngine) sendsPending() int {
	n := 0
	for _, q := range e.sends {
		n += len(q)
	}
	return n
}

// deliverSelfLocked is a Send to this rank: copied now, into the oldest
// matching Recv or as an unexpected message.
func (e *p2pEngine) deliverSelfLocked(call comm.Call) {
	b := call.Send
	m := &message{src: e.c.rank, tag: call.Tag, dtype: b.DType(), count: int64(b.Len()), size: b.ByteLen()}
	k := p2pKey{m.src, m.tag}
	if rs := e.recvs[k]; len(rs) > 0 {
		r := rs[0]
		e.popRecv(k)
		if !fits(r, m) {
			e.finishRecv(r, mismatch(r, m))
			return
		}
		copy(r.buf, b.Bytes())
		e.finishRecv(r, nil)
		return
	}
	m.data = append([]byte(nil), b.Bytes()...)
	m.got = len(m.data)
	e.unexpected[k] = append(e.unexpected[k], m)
}

// fits reports whether message m is what Recv r expects.
func fits(r *recvOp, m *message) bool { return m.dtype == r.dtype && m.count == int64(r.count) }

// mismatch is the error of a Recv r given message m that does not fit.
func mismatch(r *recvOp, m *message) error {
	local := comm.Signature{Kind: comm.KindRecv, DType: r.dtype, Root: -1, Count: int64(r.count)}
	remote := comm.Signature{Kind: comm.KindSend, DType: m.dtype, Root: -1, Count: m.count}
	return &comm.MismatchError{Peer: m.src, Local: local, Remote: remote}
}

// matchLocked gives message m, arriving or arrived, to Recv r: its bytes
// go to r's buffer from now on, or, if it does not fit, are dropped and r
// fails once m is complete.
func (e *p2pEngine) matchLocked(r *recvOp, m *message) {
	if !fits(r, m) {
		m.refused, m.discard, m.data = r, true, nil
		if m.done() {
			e.finishRecv(r, mismatch(r, m))
		}
		return
	}
	copy(r.buf, m.data[:m.got])
	m.data, m.recv, r.msg = r.buf, r, m
	if m.done() {
		r.msg = nil
		e.finishRecv(r, nil)
	}
}

// matchUnexpectedLocked gives r the oldest unexpected message of its
// sender and tag, if there is one.
func (e *p2pEngine) matchUnexpectedLocked(r *recvOp) bool {
	m := e.popUnexpectedLocked(p2pKey{r.peer, r.tag})
	if m == nil {
		return false
	}
	e.matchLocked(r, m)
	return true
}

// popUnexpectedLocked removes and returns the oldest unexpected message of
// k, or nil.
func (e *p2pEngine) popUnexpectedLocked(k p2pKey) *message {
	ms := e.unexpected[k]
	if len(ms) == 0 {
		return nil
	}
	if len(ms) == 1 {
		delete(e.unexpected, k)
	} else {
		e.unexpected[k] = ms[1:]
	}
	return ms[0]
}

func (e *p2pEngine) finishRecv(r *recvOp, err error) {
	e.nrecv--
	if err != nil {
		err = e.opError(comm.Call{Kind: comm.KindRecv, Peer: r.peer}, err)
	}
	r.work.Complete(err)
}

func (e *p2pEngine) finishSend(s *sendOp, err error) {
	if err != nil {
		err = e.opError(comm.Call{Kind: comm.KindSend, Peer: s.peer}, err)
	}
	s.work.Complete(err)
	s.data = nil
}
