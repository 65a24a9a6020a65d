package tier

import (
	"errors"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
)

// FailCode says, in a frame or a shared-memory record, why a rank ended a
// collective or aborted a communicator, so that the peer that reads it
// rebuilds an error of the same kind (comm.RemoteError): errors.Is with
// comm.ErrTimeout, comm.ErrCanceled, comm.ErrPeerFailed and comm.ErrMismatch holds on every
// rank as on the one that failed. The values travel between processes:
// never renumber them.
type FailCode uint32

const (
	FailOther    FailCode = iota // none of the below
	FailTimeout                  // its context's deadline passed
	FailCanceled                 // its context was canceled
	FailInvalid                  // it rejected its own arguments
	FailMismatch                 // ranks disagreed on a collective
	FailPeer                     // some rank failed (crashed, closed, was declared dead)
)

func (c FailCode) String() string {
	switch c {
	case FailOther:
		return "other"
	case FailTimeout:
		return "timeout"
	case FailCanceled:
		return "canceled"
	case FailInvalid:
		return "invalid"
	case FailMismatch:
		return "mismatch"
	case FailPeer:
		return "peer"
	}
	return fmt.Sprintf("FailCode(%d)", uint32(c))
}

// FailCodeOf classifies err. A peer's failure comes first (a deadline that
// passed because a rank died is that rank's failure), then a mismatch,
// then the context's end, then a bad argument.
func FailCodeOf(err error) FailCode {
	switch {
	case errors.Is(err, comm.ErrPeerFailed):
		return FailPeer
	case errors.Is(err, comm.ErrMismatch):
		return FailMismatch
	case errors.Is(err, comm.ErrTimeout):
		return FailTimeout
	case errors.Is(err, comm.ErrCanceled):
		return FailCanceled
	case errors.Is(err, comm.ErrInvalidArgument):
		return FailInvalid
	}
	return FailOther
}

// Remote is the error of a rank whose peer ended the collective (or
// aborted the communicator) with code c, saying reason; it names no
// culprit (Blamed does).
func (c FailCode) Remote(peer int, reason string) *comm.RemoteError {
	return &comm.RemoteError{Peer: peer, Reason: reason, Culprit: -1,
		Timeout: c == FailTimeout, Canceled: c == FailCanceled, PeerFailed: c == FailPeer, Mismatch: c == FailMismatch}
}

// Blamed is Remote for a peer that gave up because of the failure of
// rank b.Rank: reason is b.How. With code other than FailPeer, or a
// negative b.Rank, it is Remote(peer, reason).
func (c FailCode) Blamed(peer int, b comm.Blame, reason string) *comm.RemoteError {
	e := c.Remote(peer, reason)
	if c == FailPeer && b.Rank >= 0 {
		e.Culprit, e.CulpritOutside, e.Reason = b.Rank, b.Outside, b.How
	}
	return e
}
