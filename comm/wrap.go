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
	return &wrapped{Control: c, c: c, d: d}
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

// The blocking forms: each is the Start form through the decorator, then Wait.

func (w *wrapped) AllReduce(ctx context.Context, send, recv Buffer, op ReduceOp) error {
	return StartAllReduce(ctx, w, send, recv, op).Wait()
}

func (w *wrapped) Broadcast(ctx context.Context, buf Buffer, root int) error {
	return StartBroadcast(ctx, w, buf, root).Wait()
}

func (w *wrapped) Reduce(ctx context.Context, send, recv Buffer, op ReduceOp, root int) error {
	return StartReduce(ctx, w, send, recv, op, root).Wait()
}

func (w *wrapped) AllGather(ctx context.Context, send, recv Buffer) error {
	return StartAllGather(ctx, w, send, recv).Wait()
}

func (w *wrapped) ReduceScatter(ctx context.Context, send, recv Buffer, op ReduceOp) error {
	return StartReduceScatter(ctx, w, send, recv, op).Wait()
}

func (w *wrapped) AllToAll(ctx context.Context, send, recv Buffer) error {
	return StartAllToAll(ctx, w, send, recv).Wait()
}

func (w *wrapped) AllToAllV(ctx context.Context, send Buffer, sendCounts []int, recv Buffer, recvCounts []int) error {
	return StartAllToAllV(ctx, w, send, sendCounts, recv, recvCounts).Wait()
}

func (w *wrapped) Gather(ctx context.Context, send, recv Buffer, root int) error {
	return StartGather(ctx, w, send, recv, root).Wait()
}

func (w *wrapped) Scatter(ctx context.Context, send, recv Buffer, root int) error {
	return StartScatter(ctx, w, send, recv, root).Wait()
}

func (w *wrapped) Scan(ctx context.Context, send, recv Buffer, op ReduceOp) error {
	return StartScan(ctx, w, send, recv, op).Wait()
}

func (w *wrapped) ExScan(ctx context.Context, send, recv Buffer, op ReduceOp) error {
	return StartExScan(ctx, w, send, recv, op).Wait()
}

func (w *wrapped) Send(ctx context.Context, buf Buffer, peer, tag int) error {
	return StartSend(ctx, w, buf, peer, tag).Wait()
}

func (w *wrapped) Recv(ctx context.Context, buf Buffer, peer, tag int) error {
	return StartRecv(ctx, w, buf, peer, tag).Wait()
}

func (w *wrapped) Barrier(ctx context.Context) error { return StartBarrier(ctx, w).Wait() }
