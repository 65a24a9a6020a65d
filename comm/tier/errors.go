package tier

import (
	"context"
	"errors"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
)

// ContextError turns the end of a context into an error that wraps both the
// context's error and comm.ErrTimeout or comm.ErrCanceled.
func ContextError(err error) error {
	switch {
	case errors.Is(err, comm.ErrTimeout), errors.Is(err, comm.ErrCanceled):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", comm.ErrTimeout, err)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%w: %w", comm.ErrCanceled, err)
	}
	return err
}

// FromOutside marks cause as coming from outside the communicator it
// aborts: a composed communicator gives it to a part's Abort (comm.Control), and
// the rank it blames is the composer's (comm.Blame.Outside), whichever
// numbering its own text uses. The text and errors.Is are cause's.
func FromOutside(cause error) error {
	if cause == nil {
		return nil
	}
	return &outsideError{cause}
}

type outsideError struct{ error }

func (e *outsideError) Unwrap() error { return e.error }

// BlamesOutside tells comm.CulpritOf that the rank e's cause blames is
// the composer's (comm.Blame.Outside).
func (e *outsideError) BlamesOutside() bool { return true }

// Inside marks cause, given to the Abort of a communicator that numbers
// its ranks as the caller does (an NCCL communicator aborting its
// control), as in that communicator's own numbering: the rank it blames
// stays a rank of theirs, where Abort would take it for a composer's
// (FromOutside). A FromOutside inside it still counts: the marker nearest
// the blame decides.
func Inside(cause error) error {
	if cause == nil {
		return nil
	}
	return &insideError{cause}
}

type insideError struct{ error }

func (e *insideError) Unwrap() error { return e.error }

// BlamesOutside tells comm.CulpritOf that the rank e's cause blames is
// the aborted communicator's own (not comm.Blame.Outside).
func (e *insideError) BlamesOutside() bool { return false }
