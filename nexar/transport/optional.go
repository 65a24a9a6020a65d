package transport

import "time"

// What a transport may offer beyond Transport, and what a Handler or a
// context may offer a transport. The runtime finds each by a type
// assertion to one of these interfaces and does without it where it is
// missing: a Transport that implements none of them backs a communicator
// as well, only slower or with less precise errors.

// NowSender is a Transport that can send a frame without waiting: SendNow
// is Send, except that it sends nothing and reports false when the
// connection is busy with another frame (the caller then sends on a
// goroutine of its own). It is how a point-to-point Start sends a small
// message on the caller's goroutine without ever blocking it behind a
// large frame. It must not block.
type NowSender interface {
	SendNow(peer int, h Header, payload []byte) (sent bool, err error)
}

// PeerDropper is a Transport that can cut a peer which a detector outside
// it (the cluster's membership, failure news) declared dead, so that sends
// to it fail at once and Close does not wait for it. DropPeer reports the
// peer through Handler.PeerFailed with cause, unless it was reported
// already; it may be called from any goroutine, and more than once.
type PeerDropper interface {
	DropPeer(peer int, cause error)
}

// Poller is a Transport whose receives can read a peer's connections
// themselves (plain TCP's pumps): a receive that waits for a frame from a
// peer polls it before it sleeps, so a frame already in the socket
// reaches it without a hop through the transport's read loop.
type Poller interface {
	// Poll reads what has arrived from peer, without waiting, and
	// delivers the frames it completes to the Handler (Deliver, or
	// Placer.Landed), on the caller's goroutine. It returns at once if
	// another goroutine is reading that peer's connection. The caller
	// must hold no lock that the Handler takes. It returns how many
	// bytes have been read from peer's connections so far, by this call
	// or any other reader: a count that only grows, so that a receive
	// can tell whether bytes are still coming.
	Poll(peer int) (read uint64)
	// Pollable reports whether Poll reads anything at all (the TLS
	// lane's connections are read by their read loops alone).
	Pollable() bool
}

// Staller is a Transport that watches its own process for stalls: a
// process that was stopped or starved longer than the failure timeout
// finds its connections dead because its peers gave it up, and the
// failure is then its own. Stalled reports whether that explains a failure
// found at now, with the gap seen and the failure timeout. It must not
// block.
type Staller interface {
	Stalled(now time.Time) (gap, timeout time.Duration, ok bool)
}

// Expirer is a context whose deadline its waiters keep: its Done closes
// only when it fails, not when its deadline passes (a collective's
// operation, which arms no timer of its own). A transport that waits on
// such a context until its deadline, and gives up for that, calls Expired
// so that the operation fails at its deadline on every wait at once. The
// context is the caller's; Expired must not be called for any other
// reason.
type Expirer interface {
	Expired()
}
