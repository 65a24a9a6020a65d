package comm

import "context"

// A Decorator changes how the operations of a communicator run, for Wrap:
// a rate limiter, a tracer, a stager of host buffers.
type Decorator interface {
	// Start starts call on c, the wrapped communicator, and returns its
	// Work: every operation of the wrapper comes here, the blocking forms
	// (AllReduce, Barrier, …) included. It may change the call, run
	// something before or after it, or refuse it (a Work failed with an
	// error); the call must still take its place in c's order, or fail
	// on every rank, as Communicator says of every call.
	Start(ctx context.Context, call Call, c Communicator) *Work
	// Derive returns the decorator of made, a communicator that Split or
	// Shrink made from the wrapped one (a Split's color, a Shrink's
	// survivors), or nil to return made as it is.
	Derive(made Communicator) Decorator
}

// Wrap returns c decorated by d: every operation runs through d.Start;
// the communicators that Split and Shrink return are wrapped with
// d.Derive's decorator; Rank, Size, Close and every method of Control
// (Abort, Aborted, PeerFailed, the census) pass through to c. A decorated
// communicator thus keeps every capability of the one it wraps: an abort,
// an outside detector's news and the census reach c, and c's aborted
// signal is the wrapper's. Unwrap returns c.
func Wrap(c Communicator, d Decorator) Communicator {
	w := &wrapped{Control: c, c: c, d: d}
	w.Blocking = Blocking{S: w}
	return w
}

// Unwrap returns the communicator that Wrap decorated into c, and c
// itself when c is not a wrapper (it unwraps one level).
func Unwrap(c Communicator) Communicator {
	if w, ok := c.(*wrapped); ok {
		return w.c
	}
	return c
}

// wrapped is Wrap's communicator.
type wrapped struct {
	Blocking
	Control
	c Communicator
	d Decorator
}

func (w *wrapped) Rank() int    { return w.c.Rank() }
func (w *wrapped) Size() int    { return w.c.Size() }
func (w *wrapped) Close() error { return w.c.Close() }

func (w *wrapped) Start(ctx context.Context, call Call) *Work {
	return w.d.Start(ctx, call, w.c)
}

func (w *wrapped) Split(ctx context.Context, color, key int) (Communicator, error) {
	made, err := w.c.Split(ctx, color, key)
	return w.derive(made), err
}

func (w *wrapped) Shrink(ctx context.Context) (Communicator, error) {
	made, err := w.c.Shrink(ctx)
	return w.derive(made), err
}

// derive wraps made with d.Derive's decorator, if any.
func (w *wrapped) derive(made Communicator) Communicator {
	if made == nil {
		return nil
	}
	if d := w.d.Derive(made); d != nil {
		return Wrap(made, d)
	}
	return made
}
