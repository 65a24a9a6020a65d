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
	if ctx == nil {
		return Phase{}
	}
	p, _ := ctx.Value(phaseKey{}).(Phase)
	return p
}

// WithoutPhase is ctx without the Phase it may carry, for a call a part
// makes of a communicator of its own (NCCL's control), which is no phase
// of the composed communicator's call.
func WithoutPhase(ctx context.Context) context.Context {
	if p := PhaseOf(ctx); p.Outer == (comm.Outer{}) && p.Refused == nil {
		return ctx
	}
	return WithPhase(ctx, Phase{})
}

// SignatureOf is c.Signature() with the Outer of the Phase that ctx
// carries: what every rank must agree on for the call c started with ctx.
func SignatureOf(ctx context.Context, c comm.Call) comm.Signature {
	s := c.Signature()
	s.Outer = PhaseOf(ctx).Outer
	return s
}

// OuterAt is s, the user's collective seq, as the Outer of its phases
// (seq 0 where the call has no sequence number of its own to add).
func OuterAt(s comm.Signature, seq uint64) comm.Outer {
	h := fnv.New32a()
	var b [24]byte
	b[0], b[1], b[2] = byte(s.Kind), byte(s.DType), byte(s.Op)
	binary.LittleEndian.PutUint32(b[4:], uint32(s.Root))
	binary.LittleEndian.PutUint64(b[8:], uint64(s.Count))
	binary.LittleEndian.PutUint64(b[16:], seq)
	h.Write(b[:])
	o := comm.Outer{Kind: s.Kind, DType: s.DType, Op: s.Op, Hash: h.Sum32()}
	if o.Hash == 0 {
		o.Hash = 1
	}
	return o
}

// OuterCall is what is known of the user's collective seq from o: its
// kind, dtype and op, with root and count taken from like (the other
// side's call) when they fit o's Hash at seq; else ok is false and those
// two are not known (or o is another collective's).
func OuterCall(o comm.Outer, like comm.Signature, seq uint64) (s comm.Signature, ok bool) {
	s = comm.Signature{Kind: o.Kind, DType: o.DType, Op: o.Op, Root: like.Root, Count: like.Count}
	return s, OuterAt(s, seq) == o
}
