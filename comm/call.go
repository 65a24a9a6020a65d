package comm

import "fmt"

// Kind names an operation of the Communicator interface.
type Kind uint8

// The operations. The zero Kind is invalid.
const (
	KindAllReduce Kind = iota + 1
	KindBroadcast
	KindReduce
	KindAllGather
	KindReduceScatter
	KindAllToAll
	KindAllToAllV
	KindGather
	KindScatter
	KindScan
	KindExScan
	KindBarrier
	KindSend
	KindRecv
	KindSplit
	KindShrink // Communicator.Shrink: like Split, a method, not a Call
)

var kindNames = [...]string{"invalid", "AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter",
	"AllToAll", "AllToAllV", "Gather", "Scatter", "Scan", "ExScan", "Barrier", "Send", "Recv", "Split", "Shrink"}

func (k Kind) String() string {
	if k == 0 || int(k) >= len(kindNames) {
		return fmt.Sprintf("kind(%d)", uint8(k))
	}
	return kindNames[k]
}

// Collective reports whether every rank of the communicator takes part in k
// (so it consumes a sequence number), as opposed to point-to-point Send/Recv.
func (k Kind) Collective() bool { return k != KindSend && k != KindRecv && k != 0 }

// Reduces reports whether k combines values with a ReduceOp.
func (k Kind) Reduces() bool {
	return k == KindAllReduce || k == KindReduce || k == KindReduceScatter || k == KindScan || k == KindExScan
}

// Rooted reports whether k has a root rank.
func (k Kind) Rooted() bool {
	return k == KindBroadcast || k == KindReduce || k == KindGather || k == KindScatter
}

// Call describes one operation: the arguments of the Communicator method of
// the same name. Start takes a Call so that every operation can be started
// without blocking; the blocking methods are Start(...).Wait().
//
// Buffers per Kind (n is the per-rank element count, P the size):
//
//	AllReduce      Send n, Recv n (may be the same memory)
//	Broadcast      Send = Recv = the buffer (n on every rank)
//	Reduce         Send n; Recv n at Root, ignored elsewhere (may be zero)
//	AllGather      Send n, Recv P·n; rank r's block lands at r·n
//	ReduceScatter  Send P·n, Recv n; rank r gets block r of the reduction
//	AllToAll       Send P·n, Recv P·n; block j of Send goes to rank j
//	AllToAllV      Send Σ SendCounts, Recv Σ RecvCounts (blocks packed in rank order)
//	Gather         Send n; Recv P·n at Root, ignored elsewhere
//	Scatter        Send P·n at Root, ignored elsewhere; Recv n
//	Scan, ExScan   Send n, Recv n
//	Send, Recv     Send (resp. Recv) is the message; Peer and Tag match them
//	Barrier        no buffers
type Call struct {
	Kind       Kind
	Send, Recv Buffer
	Op         ReduceOp // reducing kinds only
	// Scalar is this rank's factor for PreMulSum (its input is multiplied
	// by it before the sum); ranks may pass different factors, as in
	// NCCL. It must be 0 for every other op, and is refused as 0 with
	// PreMulSum (the blocking forms, which carry no factor, would
	// otherwise silently zero the input).
	Scalar     float64
	Root       int   // rooted kinds only
	Peer, Tag  int   // Send and Recv only; Tag ≥ 0
	SendCounts []int // AllToAllV only: elements for each destination rank
	RecvCounts []int // AllToAllV only: elements from each source rank
}

// Outer identifies the user's call on the phases a composed communicator
// runs for it. Ranks whose phases agree but whose own calls differ (an
// AllReduce with Avg on one rank and Sum on another: the phases sum
// either way) still mismatch, in the part that sees it first; so do
// ranks whose calls are alike but are different collectives of the
// composed communicator (a Barrier that meets the next Barrier of a rank
// that ran a Broadcast elsewhere in between), when the Outer was made
// with the sequence number (tier.OuterAt).
type Outer struct {
	Kind  Kind
	DType DType
	Op    ReduceOp
	// Hash is a fingerprint of the user's whole Signature (its Root and
	// Count too) and of the sequence number tier.OuterAt was given; never
	// 0 in a set Outer.
	Hash uint32
}

// Signature is what every rank must agree on for one collective: it is
// carried in every frame (its fingerprint) and compared on arrival, so a
// mismatched call is an error, never a hang or garbage.
type Signature struct {
	Kind  Kind
	DType DType    // 0 when the kind moves no typed data (Barrier)
	Op    ReduceOp // 0 unless the kind reduces
	Root  int32    // -1 unless the kind is rooted
	Count int64    // the per-rank count every rank must agree on; -1 when ranks may differ (AllToAllV)
	Outer Outer    // the user's call, on a composed communicator's phase (tier.Phase)
}

// Signature returns the part of c that every rank must agree on (a
// composed communicator's part adds the Outer of its phase:
// tier.SignatureOf).
func (c Call) Signature() Signature {
	s := Signature{Kind: c.Kind, Root: -1, Count: -1}
	if c.Kind.Reduces() {
		s.Op = c.Op
	}
	if c.Kind.Rooted() {
		s.Root = int32(c.Root)
	}
	switch c.Kind {
	case KindAllReduce, KindBroadcast, KindReduce, KindAllGather, KindGather, KindScan, KindExScan:
		s.DType, s.Count = c.Send.DType(), int64(c.Send.Len())
	case KindReduceScatter, KindScatter:
		s.DType, s.Count = c.Recv.DType(), int64(c.Recv.Len())
	case KindAllToAll:
		s.DType, s.Count = c.Send.DType(), int64(c.Send.Len())
	case KindAllToAllV:
		s.DType = c.Send.DType()
	case KindBarrier:
		s.Count = 0
	}
	return s
}

// String is the call as a user would write it, with the arguments ranks
// must agree on: "AllReduce(4×f32, sum)", "Broadcast(16×u8, root 2)",
// "Barrier()". The zero Signature is "an unknown call".
func (s Signature) String() string {
	if s == (Signature{}) {
		return "an unknown call"
	}
	out := s.Kind.String() + "("
	sep := ""
	if s.Count >= 0 && s.Kind != KindBarrier {
		out += fmt.Sprintf("%d×%v", s.Count, s.DType)
		sep = ", "
	} else if s.DType != 0 {
		out += s.DType.String()
		sep = ", "
	}
	if s.Op != 0 {
		out += sep + s.Op.String()
		sep = ", "
	}
	if s.Root >= 0 {
		out += fmt.Sprintf("%sroot %d", sep, s.Root)
	}
	return out + ")"
}
