package transport

import (
	"context"

	"github.com/hiercomm/hiercomm/comm"
)

// FrameKind says what a frame is for.
type FrameKind uint8

const (
	// FrameData carries a piece of a collective's data: (Comm, Seq, Step)
	// name it, Sig is the sender's call.
	FrameData FrameKind = iota + 1
	// FrameP2P carries a piece of a point-to-point message: Seq is the
	// message's number among those from this sender with the same tag (Sig.Root
	// holds the tag), Step the piece.
	FrameP2P
	// FrameFail says the sender ended collective Seq on its side; the payload
	// is the reason as text, Sig the sender's call, Step encodes why
	// (a tier.FailCode).
	FrameFail
	// FrameProbe asks the receiver whether it has started collective Seq
	// and with which Signature; the sender has waited for it a while.
	FrameProbe
	// FrameProbeReply answers a probe: Sig is the receiver's call at Seq, or
	// zero when it has not started Seq yet (Step then holds its last started seq).
	FrameProbeReply
	// FrameClosed says the sender closed its side of the communicator (a
	// Split child: a world's close is the transport's close protocol) after
	// sending the receiver Sig.Count data and point-to-point frames on it:
	// once those have arrived, nothing more will.
	FrameClosed
	// FrameShrink is a message of Shrink's agreement on the failed ranks:
	// Seq is the sender's Shrink call on the communicator, Step the round,
	// the payload what the sender says (nexar/shrink.go).
	FrameShrink
	// FramePeerDown is failure news for the whole world (nexar/news.go), not
	// one communicator's (Comm is 0): world rank Sig.Root failed, as world
	// rank Seq saw it (the sender, or the rank it heard it from); the
	// payload says what happened, in the observer's words.
	FramePeerDown
	// FrameProgress asks the receiver how far the communicator composed
	// on this one has got (the progress census, nexar/progress.go); Seq
	// numbers the query.
	FrameProgress
	// FrameProgressReply answers query Seq: Sig.Root is 1 when the
	// receiver has an answer, Sig.Count is then its last started
	// collective.
	FrameProgressReply
	frameKindEnd
)

// Known reports whether k is one of the kinds above: a decoder refuses
// any other (a transport's own records never reach a Handler).
func (k FrameKind) Known() bool { return k > 0 && k < frameKindEnd }

func (k FrameKind) String() string {
	switch k {
	case FrameData:
		return "data"
	case FrameP2P:
		return "p2p"
	case FrameFail:
		return "fail"
	case FrameProbe:
		return "probe"
	case FrameProbeReply:
		return "probe-reply"
	case FrameClosed:
		return "closed"
	case FrameShrink:
		return "shrink"
	case FramePeerDown:
		return "peer-down"
	case FrameProgress:
		return "progress"
	case FrameProgressReply:
		return "progress-reply"
	}
	return "frame(?)"
}

// Header is the fixed part of every frame. On a byte stream its wire form
// is netmesh.HeaderSize bytes (nexar/transport/netmesh/wire.go); the
// payload of Len bytes follows it.
type Header struct {
	Kind FrameKind
	Comm uint64         // communicator id
	Seq  uint64         // collective sequence number (FrameP2P: message number)
	Step uint32         // step within the collective (FrameP2P: piece number)
	Sig  comm.Signature // the sender's call
	Len  uint32         // payload length in bytes, at most MaxFrame
}

// MaxFrame is the largest payload of one frame. Schedules cut larger
// messages into pieces; decoders refuse larger lengths before allocating.
const MaxFrame = 16 << 20

// Transport moves frames between the ranks of one world. It knows bytes and
// peers, nothing of collectives.
//
// Frames to one peer may arrive in any order (a transport may spread them
// over several connections): receivers match them by header, not position.
type Transport interface {
	// Rank is this process's rank in the world, Size the world's size.
	Rank() int
	Size() int
	// Send writes one frame to peer (≠ Rank()); h.Len is taken from
	// payload. It returns once payload may be reused. It is safe for
	// concurrent use. ctx bounds only the wait for the connection: a frame
	// whose writing has begun is always finished, since half a frame would
	// corrupt the stream. An error means the frame may not have been
	// delivered; a broken connection is also reported through
	// Handler.PeerFailed (never from inside Send).
	Send(ctx context.Context, peer int, h Header, payload []byte) error
	// PeerAddr is the address of peer, for error messages.
	PeerAddr(peer int) string
	// Close ends this rank's side gracefully: every frame already sent is
	// delivered and read by its peer before the connections go, waiting at
	// most min(FailureTimeout, 5 s) for peers that do not answer. The
	// Handler is not called after Close returns.
	Close() error
}

// Handler receives what a Transport reads from the network.
type Handler interface {
	// Deliver hands over a frame from peer src (authenticated by the
	// transport, not taken from the header). The handler owns payload from
	// then on; it was allocated with GetBuf and may be returned with PutBuf.
	// Deliver must not block: it is called on the transport's read loops,
	// several at once (one per connection), possibly before the
	// transport's constructor has returned.
	Deliver(src int, h Header, payload []byte)
	// PeerFailed reports that the connection to peer broke or went silent
	// for longer than the failure timeout, or that the peer closed (the
	// cause then wraps ErrPeerClosed, and every frame it sent has been
	// delivered). It is called at most once per peer, never from inside
	// Send, and must not block.
	PeerFailed(peer int, err error)
}
