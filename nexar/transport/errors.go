package transport

import (
	"errors"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
)

// ErrPeerClosed is wrapped by the *comm.PeerError a transport reports
// for a peer that closed its transport (its close protocol, as opposed to
// a crash): every frame it sent has been delivered before it is reported.
var ErrPeerClosed = errors.New("it closed its connection (its transport's Close was called)")

// ErrClosed is the error of Send after Close.
var ErrClosed = fmt.Errorf("nexar: transport closed: %w", comm.ErrClosed)

// ErrExpelled is wrapped by the *comm.PeerError a rank reports when a
// peer cut its connection because it gave this rank up: its transport
// found this rank silent, a detector declared it dead, or another rank's
// failure news named it. The process runs, but in the job's eyes it has
// failed (it was stopped or too slow, its network was cut, or a detector
// was wrong), so the error names this rank, not the peer that cut the
// connection (which is alive). A rank that was stalled says
// comm.ErrStalled instead.
var ErrExpelled = errors.New("its peers gave this rank up and cut its connections")

// ExpelledError is the failure of a rank whose connection Peer cut
// because it gave this rank up (ErrExpelled).
type ExpelledError struct {
	Peer  int
	Cause error
	Told  bool // the peer told it (failure news), rather than cut its connection
}

func (e *ExpelledError) Error() string {
	const why = "(this process was stopped or too slow, its network was cut, or a failure detector took it for dead)"
	if e.Told {
		return fmt.Sprintf("its peers have expelled it %s: %v", why, e.Cause)
	}
	return fmt.Sprintf("rank %d gave this rank up and cut its connection: its peers have expelled it %s (%v)", e.Peer, why, e.Cause)
}

func (e *ExpelledError) Unwrap() []error { return []error{ErrExpelled, e.Cause} }
