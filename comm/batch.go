package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"sync/atomic"
)

// Batch is a list of operations issued as one unit: NCCL's
// ncclGroupStart/ncclGroupEnd, torch's coalescing manager and
// batch_isend_irecv. Add the calls, then Start (or Run) the batch on a
// communicator:
//
//	var b comm.Batch
//	b.AllReduce(comm.Host(w1), comm.Host(w1), comm.Sum)
//	b.AllReduce(comm.Host(w2), comm.Host(w2), comm.Sum)
//	b.Send(comm.Host(out), right, 0)
//	b.Recv(comm.Host(in), left, 0)
//	err := b.Run(ctx, c)
//
// The zero Batch is empty and ready for calls. A Batch is filled by one
// goroutine; once started it is fixed (an Add after Start is an error and
// adds nothing) and may be started again, as it is, as often as wanted (a
// trainer's persistent gradient buckets): the buffers belong to each
// start until its Work is done, so start it again after that.
//
// What a batch promises, on every communicator:
//
//   - Its collectives take their places in the communicator's order, one
//     after another, at Start, in the batch's order (a fused run of small
//     AllReduces, see StartEach, as one); every rank must start the same
//     collectives in the same order, in batches alike. Its Send and Recv calls are
//     matched by peer and tag as on their own.
//   - Every call is posted before any is waited for, so a batch in which
//     every rank sends to its right and receives from its left cannot
//     deadlock, as the same blocking calls would.
//   - Ranks that issue different batches — a different number or kinds of
//     collectives, a collective in a batch on one rank and on its own on
//     another, different counts, dtypes, ops or roots — get an error that
//     wraps ErrMismatch (a *MismatchError) in bounded time, never a hang or
//     a wrong result: every collective of a batch carries a fingerprint of
//     the batch's list of collectives (BatchOf) in its Signature, so two
//     such ranks disagree at the batch's first collective.
//   - A bad argument of one call (a missing buffer, a wrong length) fails
//     that call as it would on its own: an *ArgError here, and the peers
//     are told (ErrPeerAbandoned); the batch's other calls run. (Where
//     the peers fuse that call with its neighbours and this rank cannot,
//     see StartEach, the ranks disagree on the fused call instead: a
//     mismatch.)
//   - Its calls may run at the same time, as a group's do in NCCL: no call
//     may read or write memory that another call of the batch writes
//     (send one AllReduce's result in the next batch, or after Wait).
//   - The Work is done when every call is. It fails with a *BatchError,
//     which names the first call, in the batch's order, that failed and
//     wraps its error (so errors.Is and errors.As see through it), and
//     counts the others that failed.
//
// A communicator that can run a batch better than call by call implements
// BatchStarter: nccl runs its collectives on device buffers as one NCCL
// group. The others run the batch as StartEach does, which fuses runs of
// small AllReduces on host memory into one.
type Batch struct {
	calls   []Call
	started atomic.Bool
}

// BatchStarter is the optional interface of a communicator that runs a
// batch natively. StartBatch must keep every promise of Batch; calls holds
// one call at least and is not modified while the Work runs; ctx carries
// the batch's fingerprint (BatchOf), which every collective's Signature
// must carry (tier.SignatureOf reads it). It may hand a batch it does not
// run natively to StartEach.
type BatchStarter interface {
	StartBatch(ctx context.Context, calls []Call) *Work
}

// Add appends c. It is an error, and adds nothing, after the batch was
// started, or for a Kind that is no call (Split and Shrink are methods);
// c's arguments are checked when the batch is started, by the
// communicator, as for a call of its own.
func (b *Batch) Add(c Call) error {
	if b.started.Load() {
		return fmt.Errorf("comm.Batch: %v added to a batch that was started already (a started batch is fixed: build another for more calls): %w", c.Kind, ErrInvalidArgument)
	}
	if c.Kind == 0 || c.Kind > KindRecv {
		return &ArgError{Kind: c.Kind, Arg: "kind", Problem: "is not an operation a batch can hold (Split and Shrink are methods, not calls)"}
	}
	b.calls = append(b.calls, c)
	return nil
}

// AllReduce adds Communicator.AllReduce(send, recv, op).
func (b *Batch) AllReduce(send, recv Buffer, op ReduceOp) error {
	return b.Add(Call{Kind: KindAllReduce, Send: send, Recv: recv, Op: op})
}

// Broadcast adds Communicator.Broadcast(buf, root).
func (b *Batch) Broadcast(buf Buffer, root int) error {
	return b.Add(Call{Kind: KindBroadcast, Send: buf, Recv: buf, Root: root})
}

// Reduce adds Communicator.Reduce(send, recv, op, root).
func (b *Batch) Reduce(send, recv Buffer, op ReduceOp, root int) error {
	return b.Add(Call{Kind: KindReduce, Send: send, Recv: recv, Op: op, Root: root})
}

// AllGather adds Communicator.AllGather(send, recv).
func (b *Batch) AllGather(send, recv Buffer) error {
	return b.Add(Call{Kind: KindAllGather, Send: send, Recv: recv})
}

// ReduceScatter adds Communicator.ReduceScatter(send, recv, op).
func (b *Batch) ReduceScatter(send, recv Buffer, op ReduceOp) error {
	return b.Add(Call{Kind: KindReduceScatter, Send: send, Recv: recv, Op: op})
}

// AllToAll adds Communicator.AllToAll(send, recv).
func (b *Batch) AllToAll(send, recv Buffer) error {
	return b.Add(Call{Kind: KindAllToAll, Send: send, Recv: recv})
}

// Barrier adds Communicator.Barrier().
func (b *Batch) Barrier() error { return b.Add(Call{Kind: KindBarrier}) }

// Send adds Communicator.Send(buf, peer, tag).
func (b *Batch) Send(buf Buffer, peer, tag int) error {
	return b.Add(Call{Kind: KindSend, Send: buf, Peer: peer, Tag: tag})
}

// Recv adds Communicator.Recv(buf, peer, tag).
func (b *Batch) Recv(buf Buffer, peer, tag int) error {
	return b.Add(Call{Kind: KindRecv, Recv: buf, Peer: peer, Tag: tag})
}

// Len is the number of calls in the batch.
func (b *Batch) Len() int { return len(b.calls) }

// Run is Start(ctx, c).Wait().
func (b *Batch) Run(ctx context.Context, c Starter) error { return b.Start(ctx, c).Wait() }

// Start issues the batch's calls on c as one unit (see Batch) and returns
// at once; ctx bounds the whole unit. An empty batch starts nothing and
// fails at once with an error wrapping ErrInvalidArgument (every rank
// that built it empty does the same, so the ranks stay aligned).
func (b *Batch) Start(ctx context.Context, c Starter) *Work {
	b.started.Store(true)
	if len(b.calls) == 0 {
		return Failed(fmt.Errorf("comm.Batch.Start: the batch is empty; add at least one call: %w", ErrInvalidArgument))
	}
	calls := b.calls[:len(b.calls):len(b.calls)]
	if h := batchHash(calls); h != 0 {
		ctx = context.WithValue(ctx, batchKey{}, h)
	}
	if bs, ok := c.(BatchStarter); ok {
		return bs.StartBatch(ctx, calls)
	}
	return StartEach(ctx, c, calls)
}

// StartEach is how a batch runs on a communicator that is no
// BatchStarter: it starts every call with c.Start, in order, and returns
// BatchWork of them. Start returns at once for every operation, so every
// Send and Recv is posted before any is waited for. Where ctx carries the
// batch's fingerprint (Batch.Start's), small AllReduces that follow one
// another on host memory, of one dtype and op, are fused: started as one
// AllReduce over a packed copy (batch_fuse.go says which, and why).
func StartEach(ctx context.Context, c Starter, calls []Call) *Work {
	works := make([]*Work, len(calls))
	h := BatchOf(ctx)
	for i := 0; i < len(calls); {
		if n := fuseRun(calls, i); n > 0 && h != 0 {
			w := startFused(ctx, c, calls[i:i+n], h)
			for j := i; j < i+n; j++ {
				works[j] = w
			}
			i += n
			continue
		}
		works[i] = c.Start(ctx, calls[i])
		i++
	}
	return BatchWork(calls, works)
}

// BatchWork returns the Work of a batch whose call calls[i] was started as
// works[i]: it is done when every one of works is, and fails with a
// *BatchError when any did.
func BatchWork(calls []Call, works []*Work) *Work {
	w := NewWork()
	go func() {
		var first *BatchError
		for i, x := range works {
			err := x.Wait()
			switch {
			case err == nil:
			case first == nil:
				first = &BatchError{Index: i, Calls: len(calls), Kind: calls[i].Kind, Err: err}
			default:
				first.Others++
			}
		}
		if first == nil {
			w.Complete(nil)
			return
		}
		w.Complete(first)
	}()
	return w
}

// BatchError is the failure of a batch: the first call, in the batch's
// order, that failed (the same call on every rank where the ranks fail
// alike), and how many of the others failed too (often because of it: a
// mismatch or a dead peer aborts the communicator).
type BatchError struct {
	Index  int   // the failed call's place in the batch, from 0
	Calls  int   // the number of calls in the batch
	Kind   Kind  // the failed call's kind
	Others int   // how many other calls of the batch failed
	Err    error // the failed call's error
}

func (e *BatchError) Error() string {
	s := fmt.Sprintf("call %d of %d in the batch (%v): %v", e.Index, e.Calls, e.Kind, e.Err)
	switch e.Others {
	case 0:
	case 1:
		s += "; 1 other call of the batch failed too"
	default:
		s += fmt.Sprintf("; %d other calls of the batch failed too", e.Others)
	}
	return s
}

func (e *BatchError) Unwrap() error { return e.Err }

// batchKey is the context key of a batch's fingerprint.
type batchKey struct{}

// BatchOf is the fingerprint of the batch whose calls were started with
// ctx (Batch.Start passes it down in the context), or 0 for a call
// started on its own or a batch with no collectives. It is a hash of the
// number of the batch's collectives and of their kinds, in order: what
// every rank knows of its batch even where one of its calls has a bad
// argument (which must fail as on its own, not as a mismatch). An
// implementer reads it through tier.SignatureOf, which puts it in the
// Outer of every collective of the batch, so that ranks whose batches
// differ disagree on each of them.
func BatchOf(ctx context.Context) uint32 {
	if ctx == nil {
		return 0
	}
	h, _ := ctx.Value(batchKey{}).(uint32)
	return h
}

// batchHash is BatchOf's fingerprint of calls: 0 when none is a
// collective, never 0 otherwise.
func batchHash(calls []Call) uint32 {
	h := fnv.New32a()
	var b [8]byte
	n := 0
	for _, c := range calls {
		if c.Kind.Collective() {
			h.Write([]byte{byte(c.Kind)})
			n++
		}
	}
	if n == 0 {
		return 0
	}
	binary.LittleEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
	if s := h.Sum32(); s != 0 {
		return s
	}
	return 1
}
