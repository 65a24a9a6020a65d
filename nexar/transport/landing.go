package transport

// Frames that land in the receiver's memory.
//
// A Handler whose receives take a frame's payload whole into their own
// buffer can offer that memory while they wait (Placer); a transport that
// reads a frame's payload in pieces it controls (plain TCP's pumps) asks
// for it when a large frame's header comes, reads the payload straight
// into it, and hands the frame over by Landed instead of Deliver. The
// kernel's copy out of the socket is then the only copy of those bytes on
// the receiving side. A transport that reads with blocking reads it cannot
// interrupt (QUIC, TLS) does not ask: its receives copy.

// LandMin is the least payload a transport asks a Placer to place: a
// smaller one shares the transport's staging reads with its neighbours.
const LandMin = 32 << 10

// Lands reports whether frames of kind k may land in a receive's memory:
// a collective's data and a point-to-point message's pieces.
func Lands(k FrameKind) bool { return k == FrameData || k == FrameP2P }

// Placer is a Handler whose receives can offer their memory to the frames
// they wait for.
type Placer interface {
	// Place names the memory into which the payload of the frame h from
	// src is to be read, now that its header has come (Lands(h.Kind),
	// h.Len ≥ LandMin), or nil: none, the payload goes to a pooled buffer
	// and Deliver as usual. The memory is claimed by by, which writes
	// into it only while the receive has not taken it back (Diverter).
	// Place must not block; it is called on the goroutine reading the
	// connection.
	Place(src int, h Header, by Diverter) []byte
	// Landed takes a frame whose payload is in the memory Place named,
	// in place of Deliver. The memory is the receive's, never the
	// pool's.
	Landed(src int, h Header, payload []byte)
}

// Diverter is what fills a landing (a transport's reader of one
// connection). Divert takes buf, a landing it may be filling, back from
// it: once Divert returns, nothing more is written into buf, and the rest
// of the frame goes to a pooled buffer and is delivered as any other.
// Divert may block while the reader finishes a read into buf; the caller
// must hold no lock that Place or Landed takes.
type Diverter interface {
	Divert(buf []byte)
}
