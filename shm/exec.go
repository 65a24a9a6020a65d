package shm

import (
	"context"
	"errors"
	"hash/fnv"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/internal/hoptrace"
)

// op is one collective from Start to the completion of its Work. It rides
// in the executor's task (tier.Task.X), which a blocking call recycles.
type op struct {
	ctx   context.Context
	call  comm.Call
	sig   comm.Signature
	seq   uint64
	verr  error    // why this rank refuses the call (a bad argument); it still takes its step
	split *splitOp // Split only
}

// execState is the executor's: the step protocol's position, and the
// heartbeat watch of its waits. One task runs at a time; it is handed from
// one to the next under the executor's lock (tier.Exec).
type execState struct {
	seq   uint64 // the running collective's sequence number
	g     uint64 // the last step this rank posted
	seen  uint64 // the last step every peer is known to have posted
	watch *watch
	// The eager collectives since the last header (eager.go): how many
	// (and eagerWild if this rank refused one), their digest, and that
	// header's collective.
	eagerSeen uint32
	eagerSum  uint64
	header    uint64
	// eagerFirst is the first of them.
	eagerFirst uint64
	// eagerLast and eagerSig: this rank's last eager collective and its
	// call, for a mismatch found after it returned (stepper.elsewhere).
	eagerLast uint64
	eagerSig  comm.Signature
	// done caches each peer's eDone, as an eager root last read it.
	done []uint64
	// parts: an eager Reduce's root's view of every rank's staged part,
	// kept so that the next one allocates nothing.
	parts [][]byte
}

// newExec is the communicator's executor: one collective at a time, in
// the order they were started, on the goroutine of a blocking call when
// nothing else is queued (no hand-off, for latency), else on a goroutine
// that drains the queue. The running task owns c.x (handed over under the
// executor's lock).
func (c *Comm) newExec() *tier.Exec[op] {
	if c.cfg.FlightRecorder > 0 {
		c.rec = tier.NewFlightRecorder(c.cfg.FlightRecorder, c.name, c.rank, c.cfg.Logger)
		if c.cfg.Ranks != nil {
			c.rec.Identify(c.name, c.job)
		}
	}
	return tier.NewExec(tier.ExecConfig[op]{
		Recorder: c.rec,
		// Run and Refuse keep nothing of the task once they return: the
		// task of a blocking call, its op inside it, serves the next.
		Recycle: true,
		Run: func(t *tier.Task[op]) error {
			t.X.seq = t.Seq
			c.x.seq = t.Seq
			return c.execute(&t.X)
		},
		Refuse: func(t *tier.Task[op], err error) error {
			t.X.seq = t.Seq
			return c.opError(&t.X, err)
		},
	})
}

// Start implements comm.Communicator. A collective's sequence number is
// fixed here; Send and Recv go to the point-to-point engine.
func (c *Comm) Start(ctx context.Context, call comm.Call) *comm.Work {
	if call.Kind == comm.KindSend || call.Kind == comm.KindRecv {
		return c.p2p.start(ctx, call)
	}
	o := c.newOp(ctx, call)
	return c.exec.Start(ctx, call, o.verr, o)
}

// Run implements tier.Runner: the blocking form of Start, which runs the
// collective on the calling goroutine when it can (tier.Exec.Do).
func (c *Comm) Run(ctx context.Context, call comm.Call) error {
	if call.Kind == comm.KindSend || call.Kind == comm.KindRecv {
		return c.p2p.start(ctx, call).Wait()
	}
	c.mark(hoptrace.ShmCall, 0)
	defer c.mark(hoptrace.ShmReturn, 0)
	o := c.newOp(ctx, call)
	return c.exec.Do(ctx, call, o.verr, o)
}

// mark records hop h of this rank at step g if a trace is running
// (internal/hoptrace); Peer is a hash of the communicator's name, the same
// on every rank of it.
func (c *Comm) mark(h hoptrace.Hop, g uint64) {
	if hoptrace.On() {
		f := fnv.New32a()
		f.Write([]byte(c.name))
		hoptrace.Mark(h, c.rank, int(f.Sum32()>>1), g, 0)
	}
}

// newOp checks call on its own; a bad call is refused when it runs.
func (c *Comm) newOp(ctx context.Context, call comm.Call) op {
	sig, verr := c.checks.Check(ctx, call, c.rank, c.size)
	return op{ctx: ctx, call: call, sig: sig, verr: verr}
}

// execute runs o on this rank and returns its error for the caller. The
// failure machine (tier.Failure) decides what its failure does.
//
// A call that this rank refuses (a bad argument, or a context that ended
// before it began) still takes its step: the header step tells the peers,
// who fail it with a *comm.RemoteError. A bad argument leaves the
// communicator usable. A failure after this rank posted its header as
// good (a context that ends mid-way, a peer that dies or closes) aborts
// the communicator: the ranks may no longer agree on which step comes
// next. So do, by the machine's rules, a mismatch and, as on every tier,
// a deadline or a cancel, this rank's or a peer's, also one that came
// before the call began (comm.EndedByDeadline).
func (c *Comm) execute(o *op) error {
	if c.killed.Load() {
		return c.opError(o, errKilled)
	}
	var refused error
	c.input(func(f *tier.Failure) tier.Effects {
		eff := f.Start(o.seq, o.sig, nil)
		if refused = f.Err(o.seq); refused != nil { // the communicator was aborted
			more, _ := f.Finish(o.seq)
			eff.Add(more)
		}
		return eff
	})
	if refused != nil {
		// An aborted rank never posts again; its peers learn from its
		// state. A bad argument is still named as such.
		if o.verr != nil {
			return c.opError(o, o.verr)
		}
		return c.opError(o, refused)
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
	c.input(func(f *tier.Failure) tier.Effects {
		var eff tier.Effects
		if err != nil {
			eff = f.Fail(o.seq, err, false)
			if s.broken && !errors.Is(err, comm.ErrClosed) && !errors.Is(err, errKilled) {
				eff.Add(f.Abort(err, false, false))
			}
		}
		more, _ := f.Finish(o.seq)
		eff.Add(more)
		return eff
	})
	if err == nil {
		return nil
	}
	return c.opError(o, err)
}

// opError wraps err as the *comm.OpError of o.
func (c *Comm) opError(o *op, err error) error {
	return &comm.OpError{Rank: c.rank, Peer: comm.PeerOf(err), Kind: o.sig.Kind, Seq: o.seq, Comm: c.name, Err: err}
}
