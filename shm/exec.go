package shm

import (
	"context"
	"errors"

	"github.com/hiercomm/hiercomm/comm"
)

// op is one collective from Start to the completion of its Work.
type op struct {
	ctx   context.Context
	call  comm.Call
	sig   comm.Signature
	seq   uint64
	verr  error // why this rank refuses the call (a bad argument); it still takes its step
	work  *comm.Work
	split *splitOp // Split only
}

// execState is the executor's: the step protocol's position, and the
// heartbeat watch of its waits. One executor runs at a time; it is handed
// from one to the next under Comm.mu.
type execState struct {
	g     uint64 // the last step this rank posted
	seen  uint64 // the last step every peer is known to have posted
	watch *watch
}

// Start implements comm.Communicator. A collective's sequence number is
// fixed here; Send and Recv go to the point-to-point engine.
func (c *Comm) Start(ctx context.Context, call comm.Call) *comm.Work {
	if call.Kind == comm.KindSend || call.Kind == comm.KindRecv {
		return c.p2p.start(ctx, call)
	}
	o := c.newOp(ctx, call)
	o.work = comm.NewWork()
	if c.enqueue(o) {
		go c.drain(nil)
	}
	return o.work
}

// newOp checks call on its own; a bad call is refused when it runs.
func (c *Comm) newOp(ctx context.Context, call comm.Call) *op {
	verr := comm.Validate(call, c.rank, c.size)
	if verr == nil {
		verr = comm.RequireHost(call)
	}
	return &op{ctx: ctx, call: call, sig: call.Signature(), verr: verr}
}

// run is the blocking form of Start: when nothing is queued or running,
// the calling goroutine takes the executor's place and runs the collective
// itself, without a Work or a trip through the queue.
func (c *Comm) run(ctx context.Context, call comm.Call) error {
	o := c.newOp(ctx, call)
	c.mu.Lock()
	if !c.running && len(c.queue) == 0 && !c.closed {
		c.seq++
		o.seq = c.seq
		c.running = true
		c.users.Add(1)
		c.mu.Unlock()
		err := c.execute(o)
		c.mu.Lock()
		more := len(c.queue) > 0
		if !more {
			c.running = false
		}
		c.mu.Unlock()
		if more {
			go c.drain(nil) // the executor's place, and its count in users, go with it
		} else {
			c.users.Done()
		}
		return err
	}
	c.mu.Unlock()
	o.work = comm.NewWork()
	if c.enqueue(o) {
		c.drain(o)
	}
	return o.work.Wait()
}

// enqueue numbers o and queues it; it reports whether the caller must
// become the executor (none was running).
func (c *Comm) enqueue(o *op) (execute bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		o.work.Complete(c.opError(o, comm.ErrClosed))
		return false
	}
	c.seq++
	o.seq = c.seq
	c.queue = append(c.queue, o)
	if c.running {
		return false
	}
	c.running = true
	c.users.Add(1)
	return true
}

// drain executes the queue in order. With until set (a blocking call's own
// op, first in the queue), it returns once until is done, handing what is
// left to a new goroutine.
func (c *Comm) drain(until *op) {
	for {
		c.mu.Lock()
		if len(c.queue) == 0 {
			c.running = false
			c.mu.Unlock()
			c.users.Done()
			return
		}
		o := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		c.mu.Unlock()
		o.work.Complete(c.execute(o))
		if o == until {
			c.mu.Lock()
			more := len(c.queue) > 0
			if !more {
				c.running = false
			}
			c.mu.Unlock()
			if more {
				go c.drain(nil)
			} else {
				c.users.Done()
			}
			return
		}
	}
}

// execute runs o on this rank and returns its error for the caller.
//
// A call that this rank refuses (a bad argument, or a context that ended
// before it began) still takes its step: the header step tells the peers,
// who fail it with a *comm.RemoteError, and the communicator goes on. A
// failure after this rank posted its header as good (a context that ends
// mid-way, a peer that dies or closes) aborts the communicator: the ranks
// may no longer agree on which step comes next. So does a mismatch.
func (c *Comm) execute(o *op) error {
	if c.killed.Load() {
		return c.opError(o, errKilled)
	}
	c.mu.Lock()
	aborted := c.aborted
	c.mu.Unlock()
	if aborted != nil {
		// An aborted rank never posts again; its peers learn from its
		// state. A bad argument is still named as such.
		if o.verr != nil {
			return c.opError(o, o.verr)
		}
		return c.opError(o, aborted)
	}
	s := &stepper{c: c, o: o, b: c.boundFor(o.ctx)}
	refusal := o.verr
	if refusal == nil && o.ctx.Err() != nil {
		refusal = ctxErr(o.ctx)
	}
	var err error
	if refusal != nil {
		err = s.refuse(refusal)
	} else {
		err = c.schedule(s)
	}
	if err == nil {
		return nil
	}
	if (s.broken || errors.Is(err, comm.ErrMismatch)) && !errors.Is(err, comm.ErrClosed) && !errors.Is(err, errKilled) {
		c.abort(err)
	}
	return c.opError(o, err)
}

// opError wraps err as the *comm.OpError of o.
func (c *Comm) opError(o *op, err error) error {
	return &comm.OpError{Rank: c.rank, Peer: peerOf(err), Kind: o.sig.Kind, Seq: o.seq, Comm: c.name, Err: err}
}

// peerOf is the peer an error names, or -1.
func peerOf(err error) int {
	var me *comm.MismatchError
	var re *comm.RemoteError
	var pe *comm.PeerError
	switch {
	case errors.As(err, &pe):
		return pe.Peer
	case errors.As(err, &me):
		return me.Peer
	case errors.As(err, &re):
		return re.Peer
	}
	return -1
}

// The blocking forms run on the calling goroutine when they can (see run);
// they shadow the comm.Blocking methods, which would always hand off.

func (c *Comm) AllReduce(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp) error {
	return c.run(ctx, comm.Call{Kind: comm.KindAllReduce, Send: send, Recv: recv, Op: op})
}

func (c *Comm) Broadcast(ctx context.Context, buf comm.Buffer, root int) error {
	return c.run(ctx, comm.Call{Kind: comm.KindBroadcast, Send: buf, Recv: buf, Root: root})
}

func (c *Comm) Reduce(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp, root int) error {
	return c.run(ctx, comm.Call{Kind: comm.KindReduce, Send: send, Recv: recv, Op: op, Root: root})
}

func (c *Comm) AllGather(ctx context.Context, send, recv comm.Buffer) error {
	return c.run(ctx, comm.Call{Kind: comm.KindAllGather, Send: send, Recv: recv})
}

func (c *Comm) ReduceScatter(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp) error {
	return c.run(ctx, comm.Call{Kind: comm.KindReduceScatter, Send: send, Recv: recv, Op: op})
}

func (c *Comm) AllToAll(ctx context.Context, send, recv comm.Buffer) error {
	return c.run(ctx, comm.Call{Kind: comm.KindAllToAll, Send: send, Recv: recv})
}

func (c *Comm) AllToAllV(ctx context.Context, send comm.Buffer, sendCounts []int, recv comm.Buffer, recvCounts []int) error {
	return c.run(ctx, comm.Call{Kind: comm.KindAllToAllV, Send: send, Recv: recv, SendCounts: sendCounts, RecvCounts: recvCounts})
}

func (c *Comm) Gather(ctx context.Context, send, recv comm.Buffer, root int) error {
	return c.run(ctx, comm.Call{Kind: comm.KindGather, Send: send, Recv: recv, Root: root})
}

func (c *Comm) Scatter(ctx context.Context, send, recv comm.Buffer, root int) error {
	return c.run(ctx, comm.Call{Kind: comm.KindScatter, Send: send, Recv: recv, Root: root})
}

func (c *Comm) Scan(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp) error {
	return c.run(ctx, comm.Call{Kind: comm.KindScan, Send: send, Recv: recv, Op: op})
}

func (c *Comm) ExScan(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp) error {
	return c.run(ctx, comm.Call{Kind: comm.KindExScan, Send: send, Recv: recv, Op: op})
}

func (c *Comm) Barrier(ctx context.Context) error {
	return c.run(ctx, comm.Call{Kind: comm.KindBarrier})
}
