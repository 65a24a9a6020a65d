package tier

import (
	"context"
	"encoding/binary"
	"hash/fnv"

	"github.com/hiercomm/hiercomm/comm"
)

// Phase is what a composed communicator (the hierarchy) passes down, in
// the context, with each call it makes of its parts: a user's own call
// has none (the zero Phase). A part reads it where it reads the call
// (SignatureOf, Validate), once, when the call is started.
type Phase struct {
	// Outer is the user's call of which this call is a phase, which the
	// part compares with the rest of the Signature (comm.Signature.Outer).
	Outer comm.Outer
	// Refused, if set, is why the composed communicator refuses the call
	// (its rank's bad argument, or a peer's it was told of): the part
	// refuses the call with this reason (Validate returns it, as an error
	// that matches comm.ErrInvalidArgument) and tells its peers that, not
	// its verdict on the call's stand-in arguments (WithoutBuffers).
	Refused error
}

// phaseKey is the context key of a Phase.
type phaseKey struct{}

// WithPhase is ctx carrying p for the call started with it.
func WithPhase(ctx context.Context, p Phase) context.Context {
	return context.WithValue(ctx, phaseKey{}, p)
}

// PhaseOf is the Phase ctx carries (WithPhase), or the zero Phase (also
// for a nil ctx: a call described without one, as a test may).
func PhaseOf(ctx context.Context) Phase {
	p, _ := phaseIn(ctx)
	return p
}

// phaseIn is the Phase ctx carries, and whether it carries one (a zero
// Phase that WithoutPhase put there included).
func phaseIn(ctx context.Context) (Phase, bool) {
	if ctx == nil {
		return Phase{}, false
	}
	p, ok := ctx.Value(phaseKey{}).(Phase)
	return p, ok
}

// WithoutPhase is ctx without the Phase it may carry, nor the batch
// (comm.BatchOf) its call may belong to, for a call a part makes of a
// communicator of its own (NCCL's control), which is no phase of the
// composed communicator's call.
func WithoutPhase(ctx context.Context) context.Context {
	p, set := phaseIn(ctx)
	if set && p.Outer == (comm.Outer{}) && p.Refused == nil || !set && (ctx == nil || comm.BatchOf(ctx) == 0) {
		return ctx
	}
	return WithPhase(ctx, Phase{})
}

// SignatureOf is c.Signature() with the Outer of the Phase that ctx
// carries: what every rank must agree on for the call c started with ctx.
// A collective of a comm.Batch that no composed communicator passed down
// (ctx carries no Phase) has the batch's fingerprint as its Outer, so
// that ranks whose batches differ disagree on every collective of them.
func SignatureOf(ctx context.Context, c comm.Call) comm.Signature {
	s := c.Signature()
	p, set := phaseIn(ctx)
	s.Outer = p.Outer
	if !set && ctx != nil && c.Kind.Collective() {
		if h := comm.BatchOf(ctx); h != 0 {
			s.Outer = comm.Outer{Kind: c.Kind, Hash: h}
		}
	}
	return s
}

// OuterAt is s, the user's collective seq, as the Outer of its phases
// (seq 0 where the call has no sequence number of its own to add).
func OuterAt(s comm.Signature, seq uint64) comm.Outer {
	h := fnv.New32a()
	var b [28]byte
	b[0], b[1], b[2] = byte(s.Kind), byte(s.DType), byte(s.Op)
	binary.LittleEndian.PutUint32(b[4:], uint32(s.Root))
	binary.LittleEndian.PutUint64(b[8:], uint64(s.Count))
	binary.LittleEndian.PutUint64(b[16:], seq)
	n := 24
	if s.Outer.Hash != 0 {
		// The call's own Outer (a comm.Batch's fingerprint), so that
		// ranks whose batches differ disagree on the phases too.
		binary.LittleEndian.PutUint32(b[24:], s.Outer.Hash)
		n = 28
	}
	h.Write(b[:n])
	o := comm.Outer{Kind: s.Kind, DType: s.DType, Op: s.Op, Hash: h.Sum32()}
	if o.Hash == 0 {
		o.Hash = 1
	}
	return o
}

// OuterCall is what is known of the user's collective seq from o: its
// kind, dtype and op, with root and count taken from like (the other
// side's call) when they fit o's Hash at seq, and so does its batch
// (like's, or none: a call of its own); else ok is false and those are
// not known (or o is another collective's).
func OuterCall(o comm.Outer, like comm.Signature, seq uint64) (s comm.Signature, ok bool) {
	s = comm.Signature{Kind: o.Kind, DType: o.DType, Op: o.Op, Root: like.Root, Count: like.Count, Outer: like.Outer}
	if OuterAt(s, seq) == o {
		return s, true
	}
	s.Outer = comm.Outer{}
	return s, like.Outer != (comm.Outer{}) && OuterAt(s, seq) == o
}
