package nccl

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// task is one collective (or Split) on its way through the stages: the
// executor (tier.Exec) numbers it and sends its record to the control in
// the order of the calls, runs its launch in that order (on the caller's
// goroutine when it blocks and nothing is queued), and the completer ends
// it, in order, once the GPU has.
type task struct {
	ctx  context.Context
	call comm.Call
	seq  uint64
	verr error       // this rank's own *comm.ArgError
	done func(error) // completes the task's Work (tier.Task.Detach)

	// check is the control's AllGather of every rank's record; all is
	// where it lands.
	check *comm.Work
	all   []byte

	// admit, when set, runs with the executor's lock held once the task
	// is numbered, before its record is sent (Split: the control's split,
	// in its place among the collectives).
	admit func() error
	// split, when set, runs on the launcher instead of an NCCL operation
	// (the control has already been split: child).
	split func() error

	// batch, when set, is the comm.Batch the task is a collective of:
	// its collectives are queued as one NCCL group (launchBatch).
	batch *batch

	// Set by the launcher.
	ev cuEvent // recorded after the operation; 0 when nothing was queued
	// finished: ev had completed when CommAbort was called (set by
	// markFinished, read by await, both on the communicator's thread), so
	// the operation ended whole before the abort could touch it.
	finished bool
	post     func() error // a host step once the event completed (Avg, Scan)
	scratch  []comm.Buffer
	err      error // the outcome decided by the launcher, when it queued nothing
}

// Start implements comm.Communicator. Collectives are numbered and their
// arguments sent to the control here, in the order of the calls; Send and
// Recv go over the control directly.
func (c *Comm) Start(ctx context.Context, call comm.Call) *comm.Work {
	if call.Kind == comm.KindSend || call.Kind == comm.KindRecv {
		return c.startP2P(ctx, call)
	}
	verr := c.check(ctx, call)
	return c.exec.Start(ctx, call, verr, &task{ctx: ctx, call: call, verr: verr})
}

// Run implements tier.Runner: the blocking form of Start, which launches
// the collective on the calling goroutine when nothing is queued.
func (c *Comm) Run(ctx context.Context, call comm.Call) error {
	if call.Kind == comm.KindSend || call.Kind == comm.KindRecv {
		return c.startP2P(ctx, call).Wait()
	}
	verr := c.check(ctx, call)
	return c.exec.Do(ctx, call, verr, &task{ctx: ctx, call: call, verr: verr})
}

// check is this rank's own verdict on call's arguments.
func (c *Comm) check(ctx context.Context, call comm.Call) error {
	if err := tier.Validate(ctx, call, c.rank, c.size); err != nil {
		return err
	}
	return c.dev.checkCall(call, "the NCCL communicator", false)
}

// newExec is the communicator's executor (see task).
func (c *Comm) newExec() *tier.Exec[*task] {
	if c.cfg.FlightRecorder > 0 {
		c.rec = tier.NewFlightRecorder(c.cfg.FlightRecorder, c.cfg.Name, c.rank, c.log)
	}
	return tier.NewExec(tier.ExecConfig[*task]{
		Recorder: c.rec,
		Admit: func(et *tier.Task[*task]) error {
			return c.admit(et.X, et.Seq)
		},
		Run: func(et *tier.Task[*task]) error {
			t := et.X
			t.done = et.Detach()
			c.launcher(t)
			return nil
		},
		Refuse: func(et *tier.Task[*task], err error) error {
			t := et.X
			if t.seq != 0 {
				// Admitted, queued, and refused at Close.
				c.release(t)
			}
			return c.opError(t.call.Kind, t.seq, -1, err)
		},
	})
}

// admit numbers t as seq and sends its record to the control, or fails it
// when the communicator is aborted (after Close the executor refuses it). The
// executor's lock is held.
func (c *Comm) admit(t *task, seq uint64) error {
	c.mu.Lock()
	if aborted := c.failure.AbortCause(); aborted != nil {
		c.mu.Unlock()
		return c.opError(t.call.Kind, 0, -1, &comm.AbortedError{Cause: aborted})
	}
	t.seq = seq
	c.inFlight++
	c.mu.Unlock()
	if t.admit != nil {
		if err := t.admit(); err != nil {
			c.release(t)
			return err
		}
	}
	mine := record(t, c.size)
	t.all = make([]byte, len(mine)*c.size)
	t.check = c.control.Start(tier.WithoutPhase(t.ctx), comm.Call{Kind: comm.KindAllGather, Send: comm.Host(mine), Recv: comm.Host(t.all)})
	return nil
}

// release gives back what t holds: its scratch and its place in inFlight.
func (c *Comm) release(t *task) {
	for _, b := range t.scratch {
		c.releaseScratch(b)
	}
	t.scratch = nil
	c.mu.Lock()
	c.inFlight--
	c.mu.Unlock()
}

// finish completes t with err.
func (c *Comm) finish(t *task, err error) {
	c.release(t)
	t.done(err)
}

// A record is what every rank compares before NCCL sees a collective:
// sequence number, signature, whether the call was rejected here and why
// (its reason's first reasonBytes bytes, for the peers' errors), and for
// AllToAllV the counts this rank sends to each rank.
const (
	headerBytes = 32
	reasonBytes = 224
	recordBytes = headerBytes + reasonBytes
)

func record(t *task, size int) []byte {
	sig := tier.SignatureOf(t.ctx, t.call)
	n := recordBytes
	if sig.Kind == comm.KindAllToAllV {
		n += 8 * size
	}
	b := make([]byte, n)
	binary.LittleEndian.PutUint64(b[0:], t.seq)
	b[8], b[9], b[10] = byte(sig.Kind), byte(sig.DType), byte(sig.Op)
	if t.verr != nil {
		b[11] = 1
		copy(b[headerBytes:recordBytes], cutUTF8(t.verr.Error(), reasonBytes))
	}
	binary.LittleEndian.PutUint32(b[12:], uint32(sig.Root))
	binary.LittleEndian.PutUint64(b[16:], uint64(sig.Count))
	b[24], b[25], b[26] = byte(sig.Outer.Kind), byte(sig.Outer.DType), byte(sig.Outer.Op)
	binary.LittleEndian.PutUint32(b[28:], sig.Outer.Hash)
	if sig.Kind == comm.KindAllToAllV && t.verr == nil {
		for j, k := range t.call.SendCounts {
			binary.LittleEndian.PutUint64(b[recordBytes+8*j:], uint64(k))
		}
	}
	return b
}

// cutUTF8 is s cut to at most n bytes, at a rune boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func parseRecord(b []byte) (seq uint64, sig comm.Signature, bad bool) {
	seq = binary.LittleEndian.Uint64(b[0:])
	sig = comm.Signature{
		Kind: comm.Kind(b[8]), DType: comm.DType(b[9]), Op: comm.ReduceOp(b[10]),
		Root:  int32(binary.LittleEndian.Uint32(b[12:])),
		Count: int64(binary.LittleEndian.Uint64(b[16:])),
		Outer: comm.Outer{Kind: comm.Kind(b[24]), DType: comm.DType(b[25]), Op: comm.ReduceOp(b[26]),
			Hash: binary.LittleEndian.Uint32(b[28:])},
	}
	return seq, sig, b[11] != 0
}

// recordReason is the reason a rejecting rank's record gives, in printable
// text (a peer's bytes are not trusted to be), or a plain statement when it
// gives none.
func recordReason(b []byte) string {
	r := strings.ToValidUTF8(string(bytes.TrimRight(b[headerBytes:recordBytes], "\x00")), "?")
	r = strings.Map(func(c rune) rune {
		if unicode.IsPrint(c) {
			return c
		}
		return '?'
	}, r)
	if r == "" {
		return "it rejected its own arguments"
	}
	return r
}

// compare checks every rank's record against this rank's: a rank that
// rejected its call makes everyone abandon it (the communicator stays
// usable); ranks that disagree are a mismatch (fatal). It returns the
// error to complete t with and whether it is fatal.
func (c *Comm) compare(t *task) (error, bool) {
	per := len(t.all) / c.size
	mySeq, mySig, _ := parseRecord(t.all[c.rank*per:])
	if t.verr != nil {
		return c.opError(t.call.Kind, t.seq, -1, t.verr), false
	}
	for r := range c.size {
		if _, _, bad := parseRecord(t.all[r*per:]); bad {
			return c.opError(t.call.Kind, t.seq, r, &comm.RemoteError{Peer: r, Reason: recordReason(t.all[r*per:])}), false
		}
	}
	for r := range c.size {
		seq, sig, _ := parseRecord(t.all[r*per:])
		if seq != mySeq || sig != mySig {
			return c.opError(t.call.Kind, t.seq, r, &comm.MismatchError{Peer: r, Seq: t.seq, Local: mySig, Remote: sig}), true
		}
	}
	if mySig.Kind == comm.KindAllToAllV {
		for r := range c.size {
			got := int64(binary.LittleEndian.Uint64(t.all[r*per+recordBytes+8*c.rank:]))
			if want := int64(t.call.RecvCounts[r]); got != want {
				return c.opError(t.call.Kind, t.seq, r, fmt.Errorf("rank %d sends %d elements to rank %d, whose recvCounts[%d] is %d: %w",
					r, got, c.rank, r, want, &comm.MismatchError{Peer: r, Seq: t.seq, Local: mySig, Remote: mySig})), true
			}
		}
	}
	return nil, false
}

// launcher runs on the executor, one task at a time in order: it waits
// for the control's comparison, then queues the NCCL operation and its
// event (or the split) and passes the task to the completer. The
// collectives of a batch are queued together, with its first (launchBatch).
func (c *Comm) launcher(t *task) {
	defer func() {
		if t.err == nil && t.ev != 0 {
			c.mu.Lock()
			c.queued = append(c.queued, t)
			c.mu.Unlock()
		}
		c.completeQ <- t
	}()
	if t.batch != nil {
		c.launchBatch(t)
		return
	}
	if !c.agreed(t) {
		return
	}
	if t.split != nil {
		t.err = t.split()
	} else if err := c.launch(t); err != nil {
		t.err = c.opError(t.call.Kind, t.seq, -1, err)
		c.abort(t.err)
	} else if c.rec != nil {
		c.rec.Note(t.seq, fmt.Sprintf("queued on stream %#x", c.stream), nil)
	}
}

// agreed waits for the control's comparison of t and reports whether t
// may be launched; when not, t.err is why (and a fatal disagreement or
// failure has aborted the communicator).
func (c *Comm) agreed(t *task) bool {
	if closed, aborted := c.state(); closed || aborted != nil {
		// The control's check may wait for peers forever: don't.
		t.err = c.stateError(t, aborted)
		if !closed && errors.Is(aborted, comm.ErrMismatch) && !c.mismatchTold {
			// A peer found the mismatch and aborted the control (and
			// so this communicator, through its watch) before this
			// rank's comparison began: the first call after it reports
			// the mismatch it is, as the comparison would have.
			c.mismatchTold = true
			peer := comm.PeerOf(aborted)
			t.err = c.opError(t.call.Kind, t.seq, peer, &comm.AbortedError{Cause: &comm.MismatchError{Peer: peer, Seq: t.seq, Local: tier.SignatureOf(t.ctx, t.call), Reported: aborted.Error()}})
		}
		return false
	}
	c.rec.Note(t.seq, "comparing the call with every rank over the control", nil)
	if err := t.check.Wait(); err != nil {
		if errors.Is(err, comm.ErrInvalidArgument) || comm.PlainAbandon(err) {
			t.err = c.opError(t.call.Kind, t.seq, -1, fmt.Errorf("comparing the call's arguments: %w", err))
		} else if errors.Is(err, comm.ErrMismatch) {
			// A peer found the mismatch first and aborted the control
			// before this rank's comparison completed.
			peer := comm.PeerOf(err)
			t.err = c.opError(t.call.Kind, t.seq, peer, &comm.MismatchError{Peer: peer, Seq: t.seq, Local: tier.SignatureOf(t.ctx, t.call), Reported: err.Error()})
			c.mismatchTold = true
			c.abort(t.err)
		} else {
			// The control's own *comm.OpError (its exchange of the
			// records) is this communicator's business: its cause, a
			// peer's report naming a rank of both, is this call's.
			if oe := (*comm.OpError)(nil); errors.As(err, &oe) && oe == err {
				err = oe.Err
			}
			t.err = c.opError(t.call.Kind, t.seq, comm.PeerOf(err), err)
			c.abort(t.err)
		}
		return false
	}
	if err, fatal := c.compare(t); err != nil {
		t.err = err
		if fatal {
			c.abort(errors.Unwrap(err))
		}
		return false
	}
	return true
}

// stateError is the error of a task that reaches a closed or aborted
// communicator.
func (c *Comm) stateError(t *task, aborted error) error {
	if aborted != nil {
		return c.opError(t.call.Kind, t.seq, -1, &comm.AbortedError{Cause: aborted})
	}
	return c.opError(t.call.Kind, t.seq, -1, comm.ErrClosed)
}

// completer completes the tasks in order, each when its event has
// completed (then its host step runs), its context ends (the
// communicator is aborted: NCCL has no way to end one operation) or NCCL
// reports an asynchronous error.
func (c *Comm) completer() {
	for t := range c.completeQ {
		if t.err != nil || t.ev == 0 {
			if t.err == nil && t.post != nil {
				if err := t.post(); err != nil {
					t.err = c.opError(t.call.Kind, t.seq, -1, err)
				}
			}
			c.finish(t, t.err)
			continue
		}
		c.finish(t, c.await(t))
	}
}

// await waits for t's event and returns t's outcome. Each poll reads the
// communicator's state once (under its lock), with the event's.
//
// An operation whose event completed before CommAbort (seen by a poll
// before it, or by markFinished just before it) ended whole: it
// succeeds, as it would have had the completer seen its event first,
// even if the communicator's aborted state is set by then. A peer that aborts after its part
// of a collective, which the others' parts then no longer need (a
// Broadcast's receiver that has it all), does not fail the collective
// on the ranks whose completer had not yet looked.
func (c *Comm) await(t *task) error {
	completed := false
	defer c.th.do(func() error {
		c.dequeue(t)
		c.recycle(t.ev, completed)
		return nil
	})
	var fault error
	var abortedAt time.Time
	wait := time.Microsecond
	for {
		var state cuResult
		var async ncclResult
		var aborted error
		var finished bool
		err := c.th.do(func() error {
			state = c.lib.drv.EventQuery(t.ev)
			// Ended before any CommAbort: now, or as markFinished saw.
			finished = t.finished || (state == cudaSuccess && !c.ncAborted)
			if _, aborted = c.state(); aborted != nil {
				return nil // CommAbort freed the NCCL communicator
			}
			if r := c.lib.nccl.CommGetAsyncError(c.nc, &async); r != ncclSuccess {
				async = r
			}
			return nil
		})
		if err != nil {
			return c.opError(t.call.Kind, t.seq, -1, err)
		}
		switch {
		case state == cudaSuccess:
			completed = true
			if fault != nil {
				return fault
			}
			if aborted != nil && !finished {
				return c.opError(t.call.Kind, t.seq, -1, &comm.AbortedError{Cause: aborted})
			}
			if t.post != nil {
				if err := t.post(); err != nil {
					return c.opError(t.call.Kind, t.seq, -1, err)
				}
			}
			return nil
		case state != cudaErrorNotReady:
			// The stream failed (e.g. an illegal address): the event will
			// never complete.
			if fault == nil {
				fault = c.opError(t.call.Kind, t.seq, -1, c.lib.cuError("the operation's event", state))
			}
			c.abort(fault)
			return fault
		case fault == nil && aborted == nil && async != ncclSuccess && async != ncclInProgress:
			fault = c.opError(t.call.Kind, t.seq, -1, c.lib.ncclError("NCCL (asynchronous error)", async, c.nc))
			c.abort(fault)
		case fault == nil && aborted == nil && t.ctx.Err() != nil:
			fault = c.opError(t.call.Kind, t.seq, -1, tier.ContextError(t.ctx.Err()))
			c.abort(fault)
		}
		if fault != nil && aborted == nil {
			_, aborted = c.state() // this poll aborted it
		}
		if aborted != nil {
			// The NCCL communicator was aborted: its kernels end and the
			// event completes; do not wait long for a device that hangs.
			if abortedAt.IsZero() {
				abortedAt = time.Now()
			} else if time.Since(abortedAt) > abortDrain {
				if fault != nil {
					return fault
				}
				return c.opError(t.call.Kind, t.seq, -1, &comm.AbortedError{Cause: aborted})
			}
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Millisecond)
	}
}

// markFinished, on the communicator's thread just before CommAbort,
// marks the queued operations whose events have completed: they ended
// before the abort (await).
func (c *Comm) markFinished() {
	c.mu.Lock()
	queued := c.queued
	c.mu.Unlock()
	for _, t := range queued {
		if c.lib.drv.EventQuery(t.ev) == cudaSuccess {
			t.finished = true
		}
	}
}

// dequeue removes t from the queued tasks, on the communicator's thread
// before its event is recycled.
func (c *Comm) dequeue(t *task) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, q := range c.queued {
		if q == t {
			c.queued = append(c.queued[:i], c.queued[i+1:]...)
			return
		}
	}
}

// abortDrain bounds the wait for the stream after an abort.
const abortDrain = 10 * time.Second
