// Package transport is the contract between nexar's runtime (package
// nexar: communicators, schedules, failure handling) and the transports
// that move its frames: a Transport sends a frame to a peer, a Handler is
// given the frames read from peers and is told when a peer fails or
// closes. A Header names what a frame is for (FrameKind, the
// communicator, the collective's sequence number and step, the sender's
// call); a transport carries it and never interprets it beyond its
// length.
//
// Beyond the interface, a transport may offer what makes a communicator
// faster or its errors more precise, each an optional interface the
// runtime finds by a type assertion: NowSender (send without waiting on a
// busy connection), PeerDropper (cut a peer declared dead elsewhere),
// Poller (receives read the sockets themselves), Staller (this process
// was stalled: the failure is its own). A Handler may be a Placer (large
// payloads land in the receive's memory; a transport's reader is then its
// Diverter), and a context given to Send may be an Expirer.
//
// An outside transport backs a communicator by implementing Transport
// (and whichever optional interfaces it can), delivering payloads from
// GetBuf, reporting a peer's close with ErrPeerClosed and Send after
// Close with ErrClosed; nexar.NewWorld joins a communicator to it.
//
// The implementations: nexar/transport/netmesh (QUIC, TCP, the TLS lane
// and the default two lanes) and nexar/transport/mem (in process). This
// package imports comm only.
package transport
