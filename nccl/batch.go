package nccl

import (
	"context"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
)

// batch is the collectives of one comm.Batch on their way through the
// launcher, which queues them as one NCCL group.
type batch struct {
	tasks []*task
	// started is closed once every task of the batch went through the
	// executor's admission (StartBatch's loop): from then on tasks and
	// each task's seq (0: refused at admission) are read only.
	started chan struct{}
	// led is set by the first of the tasks that the launcher runs: it
	// queues them all. Only the launcher, one task at a time, touches it.
	led bool
}

// StartBatch implements comm.BatchStarter: the batch's collectives are
// numbered, and compared with every rank over the control, one by one as
// Start does; the launcher then queues all that every rank agreed on
// between one ncclGroupStart and ncclGroupEnd (NCCL runs them as one
// launch), then one event per collective. A group of AllReduces on
// device buffers is thus the bucketed AllReduce of GPU memory, with no
// copy into a packed buffer. Send and Recv go over the control as on
// their own, posted before anything is waited for.
//
// What Batch promises holds call by call: a collective whose arguments
// are bad here or on a peer is abandoned (and left out of the group) as
// on its own, the others run; a mismatch aborts the communicator, and
// the collectives after it in the batch fail with it.
func (c *Comm) StartBatch(ctx context.Context, calls []comm.Call) *comm.Work {
	b := &batch{started: make(chan struct{})}
	works := make([]*comm.Work, len(calls))
	for i, call := range calls {
		if call.Kind == comm.KindSend || call.Kind == comm.KindRecv {
			works[i] = c.startP2P(ctx, call)
			continue
		}
		verr := c.check(ctx, call)
		t := &task{ctx: ctx, call: call, verr: verr, batch: b}
		b.tasks = append(b.tasks, t)
		works[i] = c.exec.Start(ctx, call, verr, t)
	}
	close(b.started)
	return comm.BatchWork(calls, works)
}

// launchBatch is the launcher's work for t, a collective of a batch. The
// first task of the batch to reach the launcher waits for the control's
// comparison of every task of the batch (their records were sent when
// they were admitted, in order), then queues the agreed ones' operations
// as one group and records an event after the group for each; the later
// tasks find their outcome set and go on to the completer as they are.
func (c *Comm) launchBatch(t *task) {
	b := t.batch
	<-b.started // StartBatch's loop admits them all without waiting
	if b.led {
		return
	}
	b.led = true
	var group []*task
	var ops []ncclOp
	for _, u := range b.tasks {
		if u.seq == 0 {
			continue // refused when admitted (aborted): its Work has failed
		}
		if !c.agreed(u) {
			continue
		}
		o, err := c.operations(u)
		if err != nil {
			u.err = c.opError(u.call.Kind, u.seq, -1, err)
			c.abort(u.err)
			continue
		}
		if len(o) > 0 {
			group = append(group, u)
			ops = append(ops, o...)
		}
	}
	if len(group) == 0 {
		return
	}
	nccl := c.lib.nccl
	ops = append(append([]ncclOp{{"ncclGroupStart", nccl.GroupStart}}, ops...), ncclOp{"ncclGroupEnd", nccl.GroupEnd})
	err := c.live(func() error {
		if err := c.queue(t.ctx, ops); err != nil {
			return err
		}
		// After ncclGroupEnd, which enqueued the whole group: an event
		// recorded inside the group would complete before it runs.
		for _, u := range group {
			if err := c.newEvent(&u.ev); err != nil {
				return err
			}
		}
		return nil
	})
	for _, u := range group {
		switch {
		case err != nil && u.ev == 0:
			u.err = c.opError(u.call.Kind, u.seq, -1, err)
		case err != nil:
			// Its event was recorded, after the whole group: the
			// completer waits for it, and reports the abort.
		case c.rec != nil:
			c.rec.Note(u.seq, fmt.Sprintf("queued on stream %#x in a group of %d", c.stream, len(group)), nil)
		}
	}
	if err != nil {
		c.abort(c.opError(t.call.Kind, t.seq, -1, err))
	}
}
