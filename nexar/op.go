package nexar

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/internal/hoptrace"
)

// controlTimeout bounds the wait of a control frame (a failure notice, a
// probe answer, FrameClosed, a Shrink round) for a link another send is
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
	done     chan struct{} // closed at the first failure
	unwatch  func() bool   // stops watching the caller's context; nil if it cannot end
	once     sync.Once
	err      error          // the first failure; written inside once, before done closes
	behind   map[int]uint64 // peers that said they have not started seq: their last started; guarded by c.mu
}

// newOp must be called with c.mu held.
func (c *Comm) newOp(parent context.Context, seq uint64, sig comm.Signature) *op {
	o := &op{c: c, seq: seq, sig: sig, done: make(chan struct{}), deadline: time.Now().Add(c.opt.Timeout)}
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

// expired ends the op at its deadline (a receive's timer saw it pass).
func (o *op) expired() {
	o.fail(localFailure(context.DeadlineExceeded), true)
}

// fail ends the collective with err (the first failure wins); with notify,
// the other ranks are told so that none waits for this one.
func (o *op) fail(err error, notify bool) {
	first := false
	o.once.Do(func() {
		first = true
		o.err = err
		close(o.done)
		if notify {
			o.c.note(func() { o.notify(err) })
		}
	})
	if !errors.Is(err, comm.ErrMismatch) {
		return
	}
	// The ranks no longer agree on what the sequence numbers mean: nothing
	// later on this communicator can be trusted. That holds too when the
	// news comes after this rank's part succeeded (finish sealed the op,
	// but has not retired it yet): as for news of a retired op (onFail,
	// onData), the communicator is aborted so that the next call reports
	// the mismatch, and the peers are told.
	sealed := !first && o.err == nil && o.c.AbortCause() == nil
	switch {
	case !first && !sealed:
		return // the op failed first and said so, or this is the abort reaching its ops
	case sealed && notify: // once told no one: the op had succeeded
		o.c.note(func() { o.notify(err) })
	}
	o.c.abort(err)
}

func (o *op) notify(err error) {
	h := Header{Kind: FrameFail, Comm: o.c.id, Seq: o.seq, Sig: o.sig}
	if me := (*comm.MismatchError)(nil); errors.As(err, &me) && me.Seq != 0 && me.Seq < o.seq && me.Local.Kind != 0 {
		// The communicator was aborted by a mismatch at an earlier
		// collective: told as that one's (this rank's call there), so a
		// peer that finished it (its part only sent) and waits here
		// reports the collective at which the calls differ, not this one.
		h.Seq, h.Sig = me.Seq, me.Local
	}
	h, reason := failNotice(h, err)
	var wg sync.WaitGroup
	for p := range o.c.members {
		if p == o.c.rank {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			o.c.sendControl(p, h, []byte(reason))
		}()
	}
	wg.Wait()
}

// remoteFailure turns a peer's failure notice into this rank's error.
func (o *op) remoteFailure(f frame) error {
	if comm.FailCode(f.h.Step) == comm.FailMismatch {
		return &comm.MismatchError{Peer: f.src, Seq: o.seq, Local: o.sig, Remote: f.h.Sig, Reported: string(f.payload)}
	}
	return o.c.noticeError(f, "")
}

// failNotice fills h (a FrameFail header) and returns the payload of a
// failure notice for err: its FailCode in Step and its text; for a peer's
// failure that err blames on a rank (comm.CulpritOf), that rank in
// Sig.Root and Sig.Count 1 when it is numbered outside this communicator
// (a composed communicator named it, comm.FromOutside), and only what
// happened to it as the text, so that every rank that hears of it names
// the same rank as the one that saw it.
func failNotice(h Header, err error) (Header, []byte) {
	code := comm.FailCodeOf(err)
	h.Step = uint32(code)
	reason := err.Error()
	if b, ok := comm.CulpritOf(err); ok && code == comm.FailPeer && b.Rank >= 0 && b.Rank <= math.MaxInt32 {
		reason = b.How
		h.Sig = comm.Signature{Root: int32(b.Rank)}
		if b.Outside {
			h.Sig.Count = 1
		}
	}
	if len(reason) > 4096 {
		reason = reason[:4096]
	}
	return h, []byte(reason)
}

// noticeError is this rank's error for the failure notice f (other than
// a mismatch), prefix put before a reason that blames no rank. A notice
// that blames this rank itself means its peers gave it up: if this
// process was stalled, the failure is this rank's own (ErrStalled).
func (c *Comm) noticeError(f frame, prefix string) error {
	code := comm.FailCode(f.h.Step)
	if code != comm.FailPeer || f.h.Sig.Root < 0 {
		return c.named(code.Remote(f.src, prefix+string(f.payload)))
	}
	b := comm.Blame{Rank: int(f.h.Sig.Root), Outside: f.h.Sig.Count == 1, How: string(f.payload)}
	re := c.named(code.Blamed(f.src, b, b.How))
	if b.Rank != c.rank || b.Outside {
		return re
	}
	if s, ok := c.w.tr.(staller); ok {
		if gap, timeout, stalled := s.stalled(time.Now()); stalled {
			return &comm.PeerError{Peer: c.rank, Addr: "this rank", Err: &stallError{gap: gap, timeout: timeout, cause: re,
				what: fmt.Sprintf("rank %d reports that it gave this rank up", f.src)}}
		}
	}
	re.Reason = "its peers gave this rank up: " + re.Reason
	return re
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
		return comm.ContextError(err)
	}
	return err
}

// finish retires the op and returns its final error for the caller.
func (o *op) finish() error {
	o.once.Do(func() {}) // seal: a failure notice arriving from now on is too late to change the outcome
	if o.unwatch != nil {
		o.unwatch()
	}
	c := o.c
	c.mu.Lock()
	delete(c.ops, o.seq)
	if o.err == nil {
		// Kept to compare with late frames and probes; a collective that
		// failed here expects late frames from peers that had not heard.
		c.recent[o.seq%uint64(len(c.recent))] = doneSig{seq: o.seq, sig: o.sig}
	}
	if o.err != nil {
		for k, f := range c.arrived {
			if k.kind == FrameData && k.seq == o.seq {
				putBuf(f.payload)
				delete(c.arrived, k)
			}
		}
	}
	behind := o.behind
	c.mu.Unlock()
	if o.err == nil {
		return nil
	}
	err := o.err
	if errors.Is(err, comm.ErrTimeout) && len(behind) > 0 {
		late := &comm.LateError{Err: err, Seq: o.seq}
		for _, p := range slices.Sorted(maps.Keys(behind)) {
			late.Ranks = append(late.Ranks, p)
			late.Last = append(late.Last, behind[p])
		}
		err = late
	}
	return &comm.OpError{Rank: c.rank, Peer: peerOf(err), Kind: o.sig.Kind, Seq: o.seq, Comm: c.name, Err: err}
}

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
	h := Header{Kind: FrameData, Comm: o.c.id, Seq: o.seq, Step: step, Sig: o.sig}
	h.Sig.Count = count
	if err := o.c.sendFrame(o, peer, h, payload); err != nil {
		return &peerFault{peer: peer, err: err}
	}
	return nil
}

// recv waits for frame step of this collective from peer. The caller owns
// the returned payload and gives it back with putBuf.
func (o *op) recv(peer int, step uint32) ([]byte, error) {
	f, err := o.recvFrame(peer, step)
	return f.payload, err
}

func (o *op) recvFrame(peer int, step uint32) (frame, error) {
	f, err := o.c.await(o, mkey{kind: FrameData, seq: o.seq, step: step, src: int32(peer)}, peer, o, o.deadline)
	if err == nil && !sigMatch(o.sig, f.h.Sig) {
		// Frames that came before this rank started the collective are
		// checked here, as they are taken.
		putBuf(f.payload)
		return frame{}, &comm.MismatchError{Peer: peer, Seq: o.seq, Local: o.sig, Remote: f.h.Sig}
	}
	return f, err
}

// await waits for the frame k from peer until ctx ends or deadline (if not
// zero) passes, or, for a Send or Recv (p nil), the communicator is
// aborted. p, when not nil, is the collective it belongs to (ctx is
// then p itself, deadline p's): the wait asks the peer where it is when it
// grows long (FrameProbe), and ends the collective at its deadline. A wait
// that must block borrows a channel and a timer from pools, so a small
// collective or message allocates neither.
func (c *Comm) await(ctx context.Context, k mkey, peer int, p *op, deadline time.Time) (frame, error) {
	c.mu.Lock()
	if f, ok := c.arrived[k]; ok {
		delete(c.arrived, k)
		c.mu.Unlock()
		hoptrace.Mark(hoptrace.Woken, c.w.rank, c.members[peer], k.seq, k.step)
		return f, nil
	}
	ch := getWaiter()
	c.waiters[k] = ch
	gone, left := c.goneLocked(peer), c.leftCh
	c.mu.Unlock()

	got := func(f frame) (frame, error) {
		putWaiter(ch)
		hoptrace.Mark(hoptrace.Woken, c.w.rank, c.members[peer], k.seq, k.step)
		return f, nil
	}
	abandon := func(err error) (frame, error) {
		c.mu.Lock()
		if c.waiters[k] == ch {
			delete(c.waiters, k)
			c.mu.Unlock()
			putWaiter(ch)
			return frame{}, err
		}
		c.mu.Unlock()
		return got(<-ch) // delivered while we gave up: it is ours after all
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
		timer = getTimer(time.Until(next))
		defer putTimer(timer)
		fire = timer.C
	}
	for {
		died, dead := c.w.peerState(c.members[peer])
		if dead != nil && peer != c.rank {
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
			err := c.aborted
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
				p.expired()
				return abandon(p.err)
			}
			if !probeAt.IsZero() && !now.Before(probeAt) {
				c.notifyLater(peer, Header{Kind: FrameProbe, Comm: c.id, Seq: p.seq, Sig: p.sig}, nil)
				wait = min(2*wait, 30*time.Second)
				probeAt = now.Add(wait)
			}
			timer.Reset(time.Until(earlier(probeAt, deadline)))
		}
	}
}

// earlier is the earlier of a and b, a zero time standing for never.
func earlier(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// Pools of what a blocking receive borrows. A waiter channel goes back
// empty (its frame taken, or never sent: the waiter left the map under
// c.mu first). A timer goes back stopped; since Go 1.23 a stopped timer's
// channel holds no stale tick, so Reset starts it clean.
var waiterPool, timerPool sync.Pool

func getWaiter() chan frame {
	if ch, ok := waiterPool.Get().(chan frame); ok {
		return ch
	}
	return make(chan frame, 1)
}

func putWaiter(ch chan frame) { waiterPool.Put(ch) }

func getTimer(d time.Duration) *time.Timer {
	if t, ok := timerPool.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

func putTimer(t *time.Timer) {
	t.Stop()
	timerPool.Put(t)
}
