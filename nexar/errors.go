package nexar

import (
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar/transport"
	"github.com/hiercomm/hiercomm/nexar/transport/netmesh"
)

// ErrStalled is comm.ErrStalled: this rank's own process was stalled
// longer than the failure timeout and its peers have given it up, so the
// connections it then finds dead are its own doing. The error names this
// rank as the one that failed, not the peer whose connection happened to
// time out first (that peer is probably alive).
var ErrStalled = comm.ErrStalled

// ErrExpelled is wrapped by the *comm.PeerError a rank reports when a
// peer cut its connection because it gave this rank up: its transport
// found this rank silent, a detector declared it dead, or another rank's
// failure news named it. The process runs, but in the job's eyes it has
// failed (it was stopped or too slow, its network was cut, or a detector
// was wrong), so the error names this rank, not the peer that cut the
// connection (which is alive). A rank that was stalled says ErrStalled
// instead.
var ErrExpelled = transport.ErrExpelled

// The errors of the transports that a communicator's errors wrap, named
// here so that a caller tests them without importing a transport package.

// ErrPeerClosed is transport.ErrPeerClosed: wrapped by the
// *comm.PeerError of a peer that closed its side (its Close, not a crash);
// every frame it sent has been delivered before it is reported.
var ErrPeerClosed = transport.ErrPeerClosed

// ErrAuth is netmesh.ErrAuth: a peer failed the job's mutual
// authentication (another job key or job id, or not a rank of this job).
var ErrAuth = netmesh.ErrAuth

// HeaderError is netmesh.HeaderError: bytes read from a peer are not a
// valid frame header (another hiercomm release, or a corrupt stream).
type HeaderError = netmesh.HeaderError
