package nexar

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/internal/hoptrace"
	"github.com/hiercomm/hiercomm/nexar/internal/timerpool"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// controlTimeout bounds the wait of a control frame (a failure notice, a
// probe answer, transport.FrameClosed, a Shrink round) for a link another send is
// using. A frame that has started is finished: its write blocks only while
// the peer's receive window is full, which ends within FailureTimeout (the
// peer reads, or is declared failed). So a control send lasts at most
// controlTimeout plus FailureTimeout.
const controlTimeout = 5 * time.Second

// op is one collective in flight on one rank: the schedule's view of the
// runtime. It is its own context (what sends and lane waits watch): done
// closes at its first failure, here or on a peer. It allocates no context
// and no timer of its own: its deadline (the caller's, or Timeout from its
// start, whichever is earlier) is kept by the timer of whichever receive
// is waiting (await), and a caller's context that can end is watched with
// one context.AfterFunc.
type op struct {
	c        *Comm
	seq      uint64
	sig      comm.Signature
	deadline time.Time
	done     chan struct{}  // closed at the first failure (applyLocked)
	unwatch  func() bool    // stops watching the caller's context; nil if it cannot end
	err      error          // the first failure; written under c.mu before done closes
	behind   map[int]uint64 // peers that said they have not started seq: their last started; guarded by c.mu
	slots    [4][]byte      // a one-lane schedule's temp slots (run)
}

// newOp must be called with c.mu held. It reuses an op that finished
// (spareOps), so that a collective allocates none.
func (c *Comm) newOp(parent context.Context, seq uint64, sig comm.Signature) *op {
	var o *op
	if n := len(c.spareOps); n > 0 {
		o = c.spareOps[n-1]
		c.spareOps = c.spareOps[:n-1]
		*o = op{c: c, seq: seq, sig: sig, done: o.done, deadline: time.Now().Add(c.opt.Timeout)}
	} else {
		o = &op{c: c, seq: seq, sig: sig, done: make(chan struct{}), deadline: time.Now().Add(c.opt.Timeout)}
	}
	if d, ok := parent.Deadline(); ok && d.Before(o.deadline) {
		o.deadline = d
	}
	if parent.Done() != nil {
		o.unwatch = context.AfterFunc(parent, func() { o.fail(localFailure(context.Cause(parent)), true) })
	}
	return o
}

// The op as a context.Context: what a send or a lane's wait watches.

func (o *op) Deadline() (time.Time, bool) { return o.deadline, true }
func (o *op) Done() <-chan struct{}       { return o.done }
func (o *op) Value(any) any               { return nil }

func (o *op) Err() error {
	select {
	case <-o.done:
		if errors.Is(o.err, comm.ErrTimeout) {
			return context.DeadlineExceeded
		}
		return context.Canceled
	default:
		return nil
	}
}

// Expired implements transport.Expirer: it ends the op at its deadline
// (a receive's timer, or a send's wait for a busy link, saw it pass).
func (o *op) Expired() {
	o.fail(localFailure(context.DeadlineExceeded), true)
}

// fail ends the collective with err (the first failure wins); with notify,
// the other ranks are told so that none waits for this one. The
// communicator's failure machine decides (tier.Failure.Fail): a mismatch
// also aborts the communicator, even after this rank's part succeeded.
func (o *op) fail(err error, notify bool) {
	o.c.input(func(f *tier.Failure) tier.Effects { return f.Fail(o.seq, err, notify) })
}

// input feeds the communicator's failure machine under c.mu and carries
// out what it decided (applyLocked, then the rest outside the lock).
func (c *Comm) input(in func(*tier.Failure) tier.Effects) {
	c.mu.Lock()
	post := c.applyLocked(in(&c.failure))
	c.mu.Unlock()
	post()
}

// applyLocked carries out the failure machine's effects, with c.mu held:
// the collectives it ended end now (their waits wake), the notices go out
// on goroutines of their own (note), and the aborted signal closes. It
// returns what must run after c.mu is released: the end of the
// point-to-point operations pending on an abort.
func (c *Comm) applyLocked(eff tier.Effects) (post func()) {
	for _, e := range eff.End {
		if o := c.ops[e.Seq]; o != nil {
			o.err = e.Err
			close(o.done)
		}
	}
	for _, t := range eff.Tell {
		h, payload := noticeFrame(c.id, t.Notice)
		if t.To == tier.Everyone {
			c.note(func() { c.tellAll(h, payload) })
		} else {
			c.notifyLater(t.To, h, payload)
		}
	}
	if eff.Aborted == nil {
		return func() {}
	}
	close(c.abortedCh)
	return func() { c.endPosted(eff.Aborted) }
}

// tellAll sends a failure notice to every live peer, in parallel.
func (c *Comm) tellAll(h transport.Header, payload []byte) {
	var wg sync.WaitGroup
	for p, wr := range c.members {
		if p == c.rank {
			continue
		}
		if _, dead := c.w.peerState(wr); dead != nil {
			continue
		}
		wg.Go(func() { c.sendControl(p, h, payload) })
	}
	wg.Wait()
}

// failAborted is Step's bit, in a failure notice, for a sender whose
// communicator is aborted (tier.Notice.Aborted).
const failAborted = 1 << 31

// noticeFrame is the transport.FrameFail header and payload of a failure notice:
// its FailCode in Step (failAborted set when the sender is aborted), its
// reason as the payload, and the call in Sig —
// for a peer's failure, the rank it blames in Sig.Root instead (-1: none)
// and Sig.Count 1 when that rank is numbered outside this communicator
// (a composed communicator named it, tier.FromOutside).
func noticeFrame(id uint64, n tier.Notice) (transport.Header, []byte) {
	h := transport.Header{Kind: transport.FrameFail, Comm: id, Seq: n.Seq, Step: uint32(n.Code), Sig: n.Sig}
	if n.Aborted {
		h.Step |= failAborted
	}
	if n.Code == tier.FailPeer {
		h.Sig = comm.Signature{Root: int32(n.Culprit)}
		if n.Outside {
			h.Sig.Count = 1
		}
	}
	return h, []byte(n.Reason)
}

// frameNotice reads a transport.FrameFail back (noticeFrame).
func frameNotice(f frame) tier.Notice {
	n := tier.Notice{Seq: f.h.Seq, Sig: f.h.Sig, Code: tier.FailCode(f.h.Step &^ failAborted), Culprit: -1,
		Aborted: f.h.Step&failAborted != 0 || f.h.Seq == 0, Reason: string(f.payload)}
	if n.Code == tier.FailPeer {
		n.Sig = comm.Signature{}
		if f.h.Sig.Root >= 0 {
			n.Culprit, n.Outside = int(f.h.Sig.Root), f.h.Sig.Count == 1
		}
	}
	return n
}

// gaveUp is the error of a failure notice that blames this rank itself
// (its peers gave it up): if this process was stalled past the failure
// timeout, the failure is this rank's own (ErrStalled); else nil, for
// the failure machine's default.
func (c *Comm) gaveUp(from int, re *comm.RemoteError) error {
	if s, ok := c.w.tr.(transport.Staller); ok {
		if gap, timeout, stalled := s.Stalled(time.Now()); stalled {
			return &comm.PeerError{Peer: c.rank, Addr: "this rank", Err: &comm.StalledError{Gap: gap, Timeout: timeout, Cause: re, What: fmt.Sprintf("rank %d reports that it gave this rank up", from)}}
		}
	}
	return nil
}

// named is re, news from rank re.Peer of this communicator, naming the
// rank by its world rank first where this is a Split child
// (RemoteError.Who): the text travels on, quoted in the errors of other
// communicators' ranks (the parts of a composed communicator relay it),
// where only the world's numbering, the job's, means anything.
func (c *Comm) named(re *comm.RemoteError) *comm.RemoteError {
	if !c.owner && re.Peer >= 0 && re.Peer < len(c.members) {
		re.Who = fmt.Sprintf("world rank %d (rank %d here)", c.members[re.Peer], re.Peer)
	}
	return re
}

// localFailure classifies an error a schedule returned.
func localFailure(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return tier.ContextError(err)
	}
	return err
}

// finish retires the op and returns its final error for the caller. A
// failure from now on is too late to change its outcome; by the deadline
// rule, one that a deadline or a cancel ended aborts the communicator
// (tier.Failure.Finish), unannounced: the collective's failure notice has
// gone to every member already, and each aborts as it reads it.
func (o *op) finish() error {
	stopped := o.unwatch == nil || o.unwatch() // nothing will fail it from outside any more
	c := o.c
	seq, kind := o.seq, o.sig.Kind
	c.mu.Lock()
	eff, err := c.failure.Finish(seq)
	delete(c.ops, seq)
	if err != nil {
		for k, f := range c.arrived {
			if k.kind == transport.FrameData && k.seq == seq {
				transport.PutBuf(f.payload)
				delete(c.arrived, k)
			}
		}
	}
	behind := o.behind
	if stopped && err == nil && len(c.spareOps) < maxSpareOps {
		select {
		case <-o.done: // closed: it cannot serve again
		default:
			c.spareOps = append(c.spareOps, o) // o is not read again here
		}
	}
	post := c.applyLocked(eff)
	c.mu.Unlock()
	post()
	if err == nil {
		return nil
	}
	if errors.Is(err, comm.ErrTimeout) && len(behind) > 0 {
		late := &comm.LateError{Err: err, Seq: seq}
		for _, p := range slices.Sorted(maps.Keys(behind)) {
			late.Ranks = append(late.Ranks, p)
			late.Last = append(late.Last, behind[p])
		}
		err = late
	}
	return &comm.OpError{Rank: c.rank, Peer: peerOf(err), Kind: kind, Seq: seq, Comm: c.name, Err: err}
}

// maxSpareOps bounds the finished ops a communicator keeps for reuse: as
// many as collectives usually run at once.
const maxSpareOps = 8

// The schedule's interface to the runtime.

func (o *op) rank() int { return o.c.rank }
func (o *op) size() int { return len(o.c.members) }

// send writes one frame of this collective to peer.
func (o *op) send(peer int, step uint32, payload []byte) error {
	return o.sendCount(peer, step, payload, o.sig.Count)
}

// sendCount is send with the Signature's Count replaced (AllToAllV frames
// tell their receiver how many elements they bring).
func (o *op) sendCount(peer int, step uint32, payload []byte, count int64) error {
	h := transport.Header{Kind: transport.FrameData, Comm: o.c.id, Seq: o.seq, Step: step, Sig: o.sig}
	h.Sig.Count = count
	if err := o.c.sendFrame(o, peer, h, payload); err != nil {
		err = &peerFault{peer: peer, err: err}
		if errors.Is(err, transport.ErrPeerClosed) {
			return o.c.closeCause(err) // collectivePeerError
		}
		return err
	}
	return nil
}

// recv waits for frame step of this collective from peer. The caller owns
// the returned payload and gives it back with transport.PutBuf.
//
// land, if not nil, is where the payload is to go, exactly as long: the
// payload returned may be land itself (landing.go), which the caller
// must not transport.PutBuf.
func (o *op) recv(peer int, step uint32, land []byte) ([]byte, error) {
	f, err := o.recvFrame(peer, step, land)
	return f.payload, err
}

func (o *op) recvFrame(peer int, step uint32, land []byte) (frame, error) {
	f, err := o.c.await(o, mkey{kind: transport.FrameData, seq: o.seq, step: step, src: int32(peer)}, peer, o, o.deadline, o.c.offer(land, o.sig))
	if err == nil && !tier.SigMatch(o.sig, f.h.Sig) {
		// Frames that came before this rank started the collective are
		// checked here, as they are taken.
		transport.PutBuf(f.payload)
		return frame{}, &comm.MismatchError{Peer: peer, Seq: o.seq, Local: o.sig, Remote: f.h.Sig}
	}
	return f, err
}

// await waits for the frame k from peer until ctx ends or deadline (if not
// zero) passes, or, for a Send or Recv (p nil), the communicator is
// aborted. p, when not nil, is the collective it belongs to (ctx is
// then p itself, deadline p's): the wait asks the peer where it is when it
// grows long (transport.FrameProbe), and ends the collective at its deadline. A wait
// that must block borrows a channel and a timer from pools, so a small
// collective or message allocates neither.
//
// land, if not nil, is the caller's memory for the frame's payload
// (Comm.offer, landing.go): the frame returned may then carry that
// memory as its payload (sameMemory), which the caller must not
// transport.PutBuf.
func (c *Comm) await(ctx context.Context, k mkey, peer int, p *op, deadline time.Time, land *landing) (frame, error) {
	c.mu.Lock()
	if f, ok := c.arrived[k]; ok {
		delete(c.arrived, k)
		c.mu.Unlock()
		hoptrace.Mark(hoptrace.Woken, c.w.rank, c.members[peer], k.seq, k.step)
		return f, nil
	}
	ch := getWaiter()
	c.waiters[k] = ch
	if land != nil {
		c.landings[k] = land
	}
	gone, left := c.goneLocked(peer), c.leftCh
	c.mu.Unlock()

	got := func(f frame) (frame, error) {
		putWaiter(ch)
		hoptrace.Mark(hoptrace.Woken, c.w.rank, c.members[peer], k.seq, k.step)
		return f, nil
	}
	abandon := func(err error) (frame, error) {
		c.mu.Lock()
		if c.waiters[k] == ch && c.leaveLocked(k, ch) {
			c.mu.Unlock()
			putWaiter(ch)
			return frame{}, err
		}
		c.mu.Unlock()
		return got(<-ch) // delivered while we gave up: it is ours after all
	}
	var (
		spun frame
		took bool
	)
	c.spin(peer, func() bool {
		select {
		case spun = <-ch:
			took = true
			return true
		case <-ctx.Done(): // the wait below ends it
			return true
		default:
			return false
		}
	})
	if took {
		return got(spun)
	}
	var (
		timer   *time.Timer
		fire    <-chan time.Time
		probeAt time.Time // zero: no probes
	)
	var aborted <-chan struct{} // a Send or Recv ends when the communicator is aborted (a collective's op fails then)
	if p == nil {
		aborted = c.abortedCh
	}
	wait := c.opt.ProbeAfter
	if p != nil && peer != c.rank {
		probeAt = time.Now().Add(wait)
	}
	if next := earlier(probeAt, deadline); !next.IsZero() {
		timer = timerpool.Get(time.Until(next))
		defer timerpool.Put(timer)
		fire = timer.C
	}
	for {
		died, dead := c.w.peerState(c.members[peer])
		if dead != nil && peer != c.rank {
			if p != nil {
				return abandon(c.collectivePeerError(peer, dead))
			}
			return abandon(c.deadPeerError(peer, dead))
		}
		if gone && peer != c.rank {
			return abandon(c.closedPeerError(peer))
		}
		select {
		case f := <-ch:
			return got(f)
		case <-left: // a rank closed its side, or sent its last frame
			c.mu.Lock()
			gone, left = c.goneLocked(peer), c.leftCh
			c.mu.Unlock()
		case <-ctx.Done():
			if p != nil {
				return abandon(p.err)
			}
			return abandon(context.Cause(ctx))
		case <-aborted:
			c.mu.Lock()
			err := c.failure.Aborted()
			c.mu.Unlock()
			return abandon(err)
		case <-c.done:
			return abandon(comm.ErrClosed)
		case <-died:
		case now := <-fire:
			if !deadline.IsZero() && !now.Before(deadline) {
				if p == nil {
					return abandon(context.DeadlineExceeded)
				}
				p.Expired()
				return abandon(p.err)
			}
			if !probeAt.IsZero() && !now.Before(probeAt) {
				c.notifyLater(peer, transport.Header{Kind: transport.FrameProbe, Comm: c.id, Seq: p.seq, Sig: p.sig}, nil)
				wait = min(2*wait, 30*time.Second)
				probeAt = now.Add(wait)
			}
			timer.Reset(time.Until(earlier(probeAt, deadline)))
		}
	}
}

// spin is the progress engine's busy wait: before a receive from peer
// sleeps, it reads the peer's connections itself (transport.Poller) until
// Options.Spin has passed since the last byte came from peer (a large
// frame still arriving is read to its end without a sleep, each sleep
// and wakeup on the way costing more than the reads between them),
// yielding the processor to this process's other goroutines
// and to other processes between tries, so that a frame that comes soon
// is taken without the sleep and the wakeup a blocking wait costs (each
// several microseconds: a small collective is a few such waits). It
// returns as soon as ready reports true (the frame came, or the wait is
// over for another reason), and reports that; false when it gave up or
// cannot spin.
func (c *Comm) spin(peer int, ready func() bool) bool {
	pl := c.w.pl
	budget := c.opt.Spin
	if budget == 0 && !c.w.crowded {
		budget = c.opt.Cost.Latency
	}
	if pl == nil || budget <= 0 || peer == c.rank {
		return false
	}
	wr := c.members[peer]
	var (
		start time.Time
		seen  uint64
	)
	for i := 0; ; i++ {
		read := pl.Poll(wr)
		if ready() {
			return true
		}
		// The budget counts from the last byte that came: a frame
		// whose bytes are still arriving is taken without a sleep.
		moved := read != seen
		seen = read
		if i%16 == 0 || moved {
			if now := time.Now(); i == 0 || moved {
				start = now
			} else if now.Sub(start) >= budget {
				return false
			}
		}
		runtime.Gosched()
		yieldCPU()
	}
}

// yieldCPU gives the processor to another process (sched_yield).
func yieldCPU() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// earlier is the earlier of a and b, a zero time standing for never.
func earlier(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// waiterPool holds what a blocking receive borrows: a waiter channel goes
// back empty (its frame taken, or never sent: the waiter left the map
// under c.mu first). Its timer comes from timerpool.
var waiterPool sync.Pool

func getWaiter() chan frame {
	if ch, ok := waiterPool.Get().(chan frame); ok {
		return ch
	}
	return make(chan frame, 1)
}

func putWaiter(ch chan frame) { waiterPool.Put(ch) }
