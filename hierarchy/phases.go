package hierarchy

import (
	"context"
	"errors"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/internal/hoptrace"
)

// part is one of the communicators a collective's phases run on, as the
// phases see it: a name for errors and the global rank of each of its
// ranks.
type part struct {
	name  string
	c     comm.Communicator
	ranks []int // nil: the world (its ranks are global ranks)
}

func (h *Comm) intraPart() part { return h.intraP }

func (h *Comm) railPart() part { return h.railP }

func (h *Comm) worldPart() part { return part{name: "world", c: h.world} }

// global maps a rank of p to its global rank (-1 stays -1).
func (p part) global(r int) int {
	if p.ranks == nil || r < 0 || r >= len(p.ranks) {
		return r
	}
	return p.ranks[r]
}

// phases runs the operations of one collective on the parts and keeps the
// ranks aligned whatever happens (see the package doc, Failures): once the
// collective is abandoned, every later operation is still started, with
// arguments its part rejects, so the part's peers are told; once it
// failed otherwise, the hierarchy is aborted and later operations are not
// started (their parts are aborted too, so no peer waits for them).
type phases struct {
	h    *Comm
	ctx  context.Context
	kind comm.Kind
	seq  uint64
	sig  comm.Signature // the user's call
	// outer is sig as every phase carries it (tier.Phase.Outer), so that
	// ranks whose user calls differ mismatch even where the phases agree
	// (Avg runs as Sum through them).
	outer comm.Outer
	// outerCtx is ctx carrying outer (tier.WithPhase), made at the first
	// phase that needs it.
	outerCtx context.Context
	// abandoned is this rank's own *comm.ArgError or the first plain
	// abandonment a part reported.
	abandoned error
	// fatal is the failure that aborted the hierarchy.
	fatal error
	// dry, when not nil, makes this a dry run (planOf): each operation is
	// recorded here instead of started.
	dry *[]planOp
	// routes, in a dry run for Route, gets each operation's part and how
	// that part runs it.
	routes *[]string
}

// pending is a started operation of a phase: its Work, or, when it ran
// at once, its outcome.
type pending struct {
	p        part
	w        *comm.Work
	ran      bool  // it ran at once; err is its outcome
	err      error // (ran)
	poisoned bool
}

// do runs c on p and waits for it.
func (x *phases) do(p part, c comm.Call) bool { return x.wait(x.issue(p, c, true)) }

// issue starts c on p, carrying the user's call (Outer), without buffers
// once the collective is abandoned, not at all once it failed. With block,
// a part with a blocking form (tier.Runner) runs it at once: on this
// goroutine when the part is idle, no hand-off per phase.
func (x *phases) issue(p part, c comm.Call, block bool) pending {
	if x.fatal != nil {
		return pending{}
	}
	if x.dry != nil {
		*x.dry = append(*x.dry, planOp{part: p.name, kind: c.Kind})
		if x.routes != nil {
			*x.routes = append(*x.routes, partRoute(p, c))
		}
		return pending{p: p, ran: true, poisoned: true}
	}
	ph := tier.Phase{Outer: x.outer}
	if x.h.rec != nil {
		x.h.rec.Note(x.seq, p.name+" "+c.Kind.String(), nil)
	}
	pd := pending{p: p, poisoned: x.abandoned != nil}
	if pd.poisoned {
		c = tier.WithoutBuffers(c)
		ph.Refused = x.refusal()
	}
	ctx := x.ctx
	switch {
	case ph.Refused != nil:
		ctx = tier.WithPhase(ctx, ph)
	case ph.Outer != (comm.Outer{}):
		// Every phase of the collective carries the same Outer: one
		// context for all of them, not one per part call.
		if x.outerCtx == nil {
			x.outerCtx = tier.WithPhase(x.ctx, ph)
		}
		ctx = x.outerCtx
	}
	x.mark(hoptrace.PartCall, p)
	if r, ok := p.c.(tier.Runner); ok && block {
		pd.ran, pd.err = true, r.Run(ctx, c)
		x.mark(hoptrace.PartReturn, p)
	} else {
		pd.w = p.c.Start(ctx, c)
	}
	return pd
}

// mark records hop h about part p if a trace is running
// (internal/hoptrace).
func (x *phases) mark(h hoptrace.Hop, p part) {
	if !hoptrace.On() {
		return
	}
	kind := hoptrace.PartIntra
	switch {
	case p.ranks == nil:
		kind = hoptrace.PartWorld
	case p.name == x.h.railP.name:
		kind = hoptrace.PartRail
	}
	hoptrace.Mark(h, x.h.rank, kind, x.seq, 0)
}

// wait waits for an operation and reports whether the collective is still
// good: this operation and all before it succeeded.
func (x *phases) wait(pd pending) bool {
	var err error
	switch {
	case pd.ran:
		err = pd.err
	case pd.w == nil: // not issued: the collective had failed
		return false
	default:
		err = pd.w.Wait()
		x.mark(hoptrace.PartReturn, pd.p)
	}
	switch {
	case pd.poisoned:
		if err != nil && !errors.Is(err, comm.ErrInvalidArgument) {
			x.fail(pd.p, err)
		}
		return false
	case err == nil:
		return x.ok()
	case comm.PlainAbandon(err):
		if x.abandoned == nil {
			peer := pd.p.global(comm.PeerOf(err))
			x.abandoned = x.h.opError(x.kind, x.seq, peer, pd.p.abandoned(peer, err))
		}
		return false
	}
	x.fail(pd.p, err)
	return false
}

// refusal is what the parts tell their peers once the collective is
// abandoned: this rank's own bad argument, or the peer's report (in
// global terms) that made it abandon, so that every rank reads the
// reason of the rank that refused, not the parts' verdict on the empty
// stand-in calls.
func (x *phases) refusal() error {
	if oe, ok := x.abandoned.(*comm.OpError); ok {
		return oe.Err
	}
	return x.abandoned
}

// ok reports whether the collective is still good.
func (x *phases) ok() bool { return x.fatal == nil && x.abandoned == nil }

// local records the error of a local step (a copy, a division, an
// allocation), which aborts the collective.
func (x *phases) local(what string, err error) bool {
	if err != nil {
		x.fail(part{name: what}, err)
		return false
	}
	return true
}

// preMul is the send c's phases reduce for PreMulSum: scratch holding this
// rank's input times its factor (Stager.PreMul). In a dry run, or after a
// failure, it is what alloc gives.
func (x *phases) preMul(c comm.Call) comm.Buffer {
	scaled := x.alloc(c.Send, c.Send.Len())
	if x.routes != nil || !x.ok() {
		return scaled
	}
	x.local("scaling for PreMulSum", x.h.cfg.Stager.PreMul(scaled, c.Send, c.Scalar))
	return scaled
}

// alloc returns scratch memory like like, or a zero Buffer after a failure.
func (x *phases) alloc(like comm.Buffer, n int) comm.Buffer {
	if x.routes != nil {
		// Route's dry run: a stand-in of the right length, never
		// touched, so that each part says how it would run the size.
		return comm.Device(0, n, like.DType(), 0)
	}
	if !x.ok() { // the operations that follow are poisoned: no buffers
		return comm.Buffer{}
	}
	b, err := x.h.cfg.Stager.Alloc(like, n)
	if err != nil {
		x.local("allocating scratch memory", err)
		return comm.Buffer{}
	}
	return b
}

// fail aborts the hierarchy because an operation on p failed with err. A
// mismatch becomes a *comm.MismatchError for this rank's own call; so does
// a peer's failure where the census finds a mismatch (a rank that closed
// on its mismatch error before this one asked: its announcement says
// what it called).
func (x *phases) fail(p part, err error) {
	if x.fatal != nil {
		return
	}
	peer := p.global(comm.PeerOf(err))
	var cause error
	switch {
	case errors.Is(err, comm.ErrMismatch):
		me := x.userMismatch(p, peer, err)
		x.fatal = x.h.opError(x.kind, x.seq, me.Peer, me)
		cause = me
	case errors.Is(err, comm.ErrPeerFailed):
		if me := x.h.verdict(x.seq); me != nil {
			// The peer left after its own call was found mismatched
			// (it closed on its error): the mismatch is the cause.
			x.fatal = x.h.opError(x.kind, x.seq, me.Peer, me)
			cause = me
			break
		}
		if pe := x.h.blame(p, peer, err); pe != nil {
			x.fatal = x.h.opError(x.kind, x.seq, pe.Peer, pe)
			cause = x.fatal
			break
		}
		fallthrough
	default:
		late := x.h.late(p, err)
		if errors.Is(err, comm.ErrTimeout) {
			// A deadline, this rank's or a peer's that reached it first:
			// ask every rank where it is, so that the error names the
			// ranks that had not started this collective, not the part's
			// peer it waited on (with a peer's deadline, that peer's own
			// hint came along: rank 0 named rank 2, whose deadline had
			// named the straggler, rank 3), or the mismatch that kept
			// them apart.
			me, g := x.h.askWhere(x.seq, x.kind, late, p.wrap(err))
			if me != nil {
				x.fatal = x.h.opError(x.kind, x.seq, me.Peer, me)
				x.h.abort(me)
				return
			}
			if g != nil {
				late = g
			}
		}
		if late != nil {
			x.fatal = x.h.opError(x.kind, x.seq, firstOr(late.Ranks, firstOr(late.Silent, peer)), late)
		} else {
			x.fatal = x.h.opError(x.kind, x.seq, peer, p.wrap(err))
		}
		cause = x.fatal
	}
	x.h.abort(cause)
}

// firstOr is rs[0], or def when rs is empty.
func firstOr(rs []int, def int) int {
	if len(rs) == 0 {
		return def
	}
	return rs[0]
}

// late is a part's deadline that names the part's ranks that had not
// started its operation (*comm.LateError), in the hierarchy's terms:
// global ranks, and the phase as the part's operation. It is nil for any
// other error.
func (h *Comm) late(p part, err error) *comm.LateError {
	var le *comm.LateError
	var oe *comm.OpError
	if !errors.As(err, &le) || len(le.Ranks) == 0 || !errors.As(err, &oe) {
		return nil
	}
	g := &comm.LateError{Err: le.Err, Seq: le.Seq, Last: le.Last,
		What: fmt.Sprintf("this collective's %v #%d on %s", oe.Kind, le.Seq, p.name)}
	if re, ok := le.Err.(*comm.RemoteError); ok {
		g.Err = p.globalRemote(re) // a peer's deadline
	}
	for _, r := range le.Ranks {
		r = p.global(r)
		g.Ranks = append(g.Ranks, r)
		g.Who = append(g.Who, fmt.Sprintf("rank %d (%s)", r, h.where(r)))
	}
	return g
}

// blame is the failure of a part's operation that err blames on a rank
// (comm.CulpritOf), in the hierarchy's terms: a *comm.PeerError naming
// the global rank, whose Err says what happened to it and how the news
// came (through p; from, a global rank, told this one), and wraps err.
// It is nil when err blames no rank.
func (h *Comm) blame(p part, from int, err error) *comm.PeerError {
	b, ok := comm.CulpritOf(err)
	if !ok || b.Rank < 0 {
		return nil
	}
	g := b.Rank
	if !b.Outside {
		g = p.global(b.Rank)
	}
	if g >= h.size {
		return nil
	}
	via := "through " + p.name
	if from >= 0 && from != g && from != h.rank {
		via += fmt.Sprintf(", from rank %d", from)
	}
	return &comm.PeerError{Peer: g, Addr: h.where(g), Err: &comm.ViaError{How: b.How, Via: via, Err: err}}
}

// wrap is a part's error as the hierarchy reports it: the part's name and
// operation, then the cause, without the part's own rank and name (a
// part's rank is not a global one, and a part may call itself "world").
func (p part) wrap(err error) error {
	var oe *comm.OpError
	if !errors.As(err, &oe) || oe != err {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	pe := &partError{part: p.name, op: oe, cause: oe.Err}
	// The peer that gave up, or whose news aborted the part, by its
	// global rank.
	var re *comm.RemoteError
	switch e := oe.Err.(type) {
	case *comm.RemoteError:
		pe.cause = p.globalRemote(e)
	case *comm.AbortedError:
		if errors.As(e.Cause, &re) {
			pe.cause = &comm.AbortedError{Cause: p.globalRemote(re)}
		}
	default:
		// News that came through the part's own machinery (an NCCL
		// part's control, whose error it quotes): the peer's report,
		// by the peer's global rank.
		if errors.As(e, &re) {
			pe.cause = p.globalRemote(re)
		}
	}
	return pe
}

// globalRemote is a part's *comm.RemoteError with the peer's global rank.
func (p part) globalRemote(re *comm.RemoteError) *comm.RemoteError {
	g := *re
	g.Peer = p.global(re.Peer)
	g.Who = "" // the global rank says it
	return &g
}

// partError is a part's *comm.OpError under the part's name (part.wrap);
// cause is its Err as the hierarchy words it.
type partError struct {
	part  string
	op    *comm.OpError
	cause error
}

func (e *partError) Error() string {
	return fmt.Sprintf("%s, its %v #%d: %v", e.part, e.op.Kind, e.op.Seq, e.cause)
}

// Unwrap gives the cause as the hierarchy words it first (comm.PeerOf
// then finds the peer by its global rank), then the part's own error.
func (e *partError) Unwrap() []error { return []error{e.cause, e.op} }

// abandoned is a part's plain abandonment (a peer rejected its own
// arguments) in the hierarchy's terms: the peer's *comm.RemoteError with
// its global rank, and the part it came through.
func (p part) abandoned(peer int, err error) error {
	var re *comm.RemoteError
	if !errors.As(err, &re) {
		return p.wrap(err)
	}
	g := p.globalRemote(re)
	g.Reason += " (through " + p.name + ")"
	return g
}

// userMismatch is a part's mismatch error as a *comm.MismatchError of the
// user's calls. The census's verdict comes first (settle: every rank's
// own calls, compared from the first collective at which they differ,
// once every rank has started this one);
// without one, where the part compared the phase's Outer with the peer's,
// the peer's call is known (its kind, dtype and op; its count and root
// when they fit the fingerprint), else the part's report is quoted.
func (x *phases) userMismatch(p part, peer int, err error) *comm.MismatchError {
	if me := x.h.settle(x.ctx, x.seq); me != nil {
		return me
	}
	var me *comm.MismatchError
	if errors.As(err, &me) && me.Remote.Outer.Hash != 0 && me.Remote.Outer != x.outer {
		remote, ok := tier.OuterCall(me.Remote.Outer, x.sig, x.seq)
		if ok {
			return &comm.MismatchError{Peer: peer, Seq: x.seq, Local: x.sig, Remote: remote}
		}
		if remote.Kind == x.sig.Kind && remote.DType == x.sig.DType && remote.Op == x.sig.Op {
			return &comm.MismatchError{Peer: peer, Seq: x.seq, Local: x.sig,
				Reported: fmt.Sprintf("it called %v with a different count or root, or in another comm.Batch (seen in the %s)", x.sig.Kind, p.name)}
		}
		return &comm.MismatchError{Peer: peer, Seq: x.seq, Local: x.sig,
			Reported: fmt.Sprintf("it called %v on %v with op %v, and a count or root this rank cannot tell (seen in the %s)",
				remote.Kind, remote.DType, remote.Op, p.name)}
	}
	return &comm.MismatchError{Peer: peer, Seq: x.seq, Local: x.sig, Reported: fmt.Sprintf("%s: %v", p.name, err)}
}

// mismatch aborts the hierarchy with a *comm.MismatchError this rank
// found itself: peer made the same call (Remote) with arguments the
// Signature does not carry (AllToAllV's counts) that disagree with this
// rank's; what says how.
func (x *phases) mismatch(peer int, what string) {
	if x.fatal != nil {
		return
	}
	cause := fmt.Errorf("%s: %w", what, &comm.MismatchError{Peer: peer, Seq: x.seq, Local: x.sig, Remote: x.sig})
	x.fatal = x.h.opError(x.kind, x.seq, peer, cause)
	x.h.abort(cause)
}

// err is the collective's result.
func (x *phases) err() error {
	if x.fatal != nil {
		return x.fatal
	}
	return x.abandoned
}
