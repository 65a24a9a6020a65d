package commtest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// BatchRank checks comm.Batch on c; every rank of the world must call it.
// The steps:
//
//   - mixed: collectives of every shape (as NonBlockingRank's) and two
//     rings of Send and Recv, in one batch, the Send before the Recv on
//     every rank, each result checked;
//   - ring: a batch of only a large Send to the right and a Recv from the
//     left on two tags, which the same blocking calls would deadlock;
//   - small AllReduces: runs of small AllReduces of one dtype and op, in
//     place and not (which comm.StartEach fuses on host memory);
//   - buckets: many AllReduces of mixed lengths (0 included), dtypes and
//     ops in one batch, run twice (a batch is started again as it is);
//   - empty: an empty batch fails with comm.ErrInvalidArgument on every
//     rank, starting nothing; so does a call added after Start, which
//     adds nothing;
//   - missing buffer: one rank's second AllReduce has no send buffer: that
//     rank gets a *comm.BatchError naming call 1 that wraps a
//     *comm.ArgError, the others comm.ErrPeerAbandoned (or nothing), the
//     first AllReduce is right on every rank, and the communicator still
//     works;
//   - mismatches (2 ranks or more), each on a fresh Split of c: one
//     rank's batch has one more collective; one rank starts the batch's
//     collectives on their own; one rank's second collective has another
//     count; one rank's collectives come in another order; one rank cuts
//     the same elements into small AllReduces differently. Every rank must
//     get an error with errors.Is(err, comm.ErrMismatch) within
//     Options.Timeout, or nil, and then its next call must report the
//     mismatch;
//   - a rank that does not come (2 ranks or more, on a fresh Split): the
//     others' batch, with a deadline FaultDeadline away, fails with a
//     *comm.BatchError wrapping comm.ErrTimeout.
//
// Buffers come from Options.Memory (device memory for a GPU
// communicator), so the batches run on the memory the tier runs on.
func BatchRank(ctx context.Context, c comm.Communicator, opt Options) error {
	o := opt.withDefaults()
	rank, size := c.Rank(), c.Size()
	// mixedCases, with a second ring (another dtype, so another tag)
	// between the collectives.
	mixed := append(mixedCases(size), newCase(comm.KindSend, comm.U8, 0, 9, 0, plain))
	mixed[len(mixed)-1], mixed[5] = mixed[5], mixed[len(mixed)-1]
	ring := []testCase{
		newCase(comm.KindSend, comm.F32, 0, 1<<16+3, 0, plain),
		newCase(comm.KindSend, comm.I64, 0, 1000, 0, plain),
	}
	ring[1].rename("SendRecv/i64/n=1000/second tag")
	var buckets []testCase
	kinds := []struct {
		dt comm.DType
		op comm.ReduceOp
	}{{comm.F32, comm.Sum}, {comm.BF16, comm.Max}, {comm.I64, comm.Prod}, {comm.F64, comm.Avg}, {comm.F16, comm.Sum}, {comm.U8, comm.Min}}
	for i, n := range mixedLengths {
		k := kinds[i%len(kinds)]
		buckets = append(buckets, newCase(comm.KindAllReduce, k.dt, k.op, n, 0, plain))
	}
	// small: runs of small AllReduces of one dtype and op, which a
	// communicator that runs batches call by call fuses on host memory.
	var small []testCase
	for i, n := range []int{1, 7, 0, 100, 3, 1000, 33, 5} {
		v := plain
		if i%2 == 1 {
			v = inPlace
		}
		small = append(small, newCase(comm.KindAllReduce, comm.F32, comm.Sum, n, 0, v))
	}
	for _, n := range []int{3, 50, 11} {
		small = append(small, newCase(comm.KindAllReduce, comm.I64, comm.Max, n, 0, plain))
	}
	steps := []step{
		{name: "Batch/small AllReduces", run: func(ctx context.Context, a *arena) (string, error) { return batchStep(ctx, c, small, 1, o) }},
		{name: "Batch/mixed", run: func(ctx context.Context, a *arena) (string, error) { return batchStep(ctx, c, mixed, 1, o) }},
		{name: "Batch/ring", run: func(ctx context.Context, a *arena) (string, error) { return batchStep(ctx, c, ring, 1, o) }},
		{name: "Batch/buckets, run twice", run: func(ctx context.Context, a *arena) (string, error) { return batchStep(ctx, c, buckets, 2, o) }},
		{name: "Batch/empty, and a call added after Start", run: func(ctx context.Context, a *arena) (string, error) { return batchMisuse(ctx, c, a) }},
		{name: "Batch/missing buffer on one rank", run: func(ctx context.Context, a *arena) (string, error) {
			return batchMissing(ctx, c, a, size-1, o)
		}},
	}
	err := runSteps(ctx, c, steps, o, "Batch")
	if size < 2 || err != nil {
		return err
	}
	r := newReport("Batch mismatch", rank, o)
	for _, mc := range batchMismatches {
		name := "Batch/mismatch/" + mc.name
		r.ran++
		stepCtx, cancel := context.WithTimeout(ctx, o.Timeout)
		goOn := guard(stepCtx, r, name, o, func(r *report) bool { return batchMismatchBody(stepCtx, c, mc, name, o, r) })
		cancel()
		if !goOn {
			r.stopped = fmt.Sprintf("stopped after %s", mc.name)
			break
		}
	}
	if r.stopped == "" {
		name := "Batch/one rank does not come"
		r.ran++
		stepCtx, cancel := context.WithTimeout(ctx, o.Timeout)
		guard(stepCtx, r, name, o, func(r *report) bool { return batchAbsentBody(stepCtx, c, name, o, r) })
		cancel()
	}
	o.Log("commtest Batch mismatch: rank %d: %d cases, %d failed%s", rank, r.ran, r.failed, r.margin())
	return r.err()
}

// batchAbsentBody: on a fresh Split, every rank but the last starts a
// batch of two collectives with a deadline FaultDeadline away, which the
// last never starts: their batch must fail with an error wrapping
// comm.ErrTimeout (a *comm.BatchError), as a single call would. Every rank
// then meets the others in a Barrier of c, the last straight away.
func batchAbsentBody(ctx context.Context, c comm.Communicator, name string, o Options, r *report) bool {
	f := newFreshCase(ctx, c, name, o, r)
	if f == nil {
		return false
	}
	defer f.end(name, r)
	rank, size := c.Rank(), c.Size()
	var b comm.Batch
	err := errors.Join(b.Add(allReduce(f.b, comm.F32, mismatchN, comm.Sum)), b.Add(broadcast(f.b, comm.I32, 10, 0)))
	if err == nil {
		err = f.b.err
	}
	if err != nil {
		r.fail(name, "%v", err)
		return false
	}
	if rank != size-1 {
		dctx, cancel := context.WithTimeout(ctx, FaultDeadline)
		err := b.Run(dctx, f.child)
		cancel()
		var be *comm.BatchError
		if !errors.Is(err, comm.ErrTimeout) || !errors.As(err, &be) {
			r.fail(name, "rank %d never started the batch; this rank's batch returned %v; want a *comm.BatchError wrapping comm.ErrTimeout", size-1, err)
		}
	}
	if err := c.Barrier(ctx); err != nil {
		r.callFailed(name+" (Barrier of the parent after it)", err)
		return false
	}
	return true
}

// batchStep prepares cases, adds their calls to one batch (a SendRecv
// case as a Send to the right, then a Recv from the left), runs it times
// times and checks every result.
func batchStep(ctx context.Context, c comm.Communicator, cases []testCase, times int, o Options) (string, error) {
	rank, size := c.Rank(), c.Size()
	left := (rank - 1 + size) % size
	var ps []*prepared
	defer func() {
		for _, p := range ps {
			p.free()
		}
	}()
	var b comm.Batch
	for i := range cases {
		p, err := prepare(&cases[i], rank, size, o.Memory)
		if err != nil {
			return "", err
		}
		ps = append(ps, p)
		k := p.call
		if k.Kind == comm.KindSend {
			err = errors.Join(b.Send(k.Send, k.Peer, k.Tag), b.Recv(k.Recv, left, k.Tag))
		} else {
			err = b.Add(k)
		}
		if err != nil {
			return "", fmt.Errorf("adding %s: %w", cases[i].name, err)
		}
	}
	for range times {
		if err := b.Run(ctx, c); err != nil {
			return "", err
		}
	}
	for _, p := range ps {
		msg, err := p.verify()
		if err != nil {
			return "", err
		}
		if msg != "" {
			return p.tc.name + ": " + msg, nil
		}
	}
	return "", nil
}

// batchMisuse checks the errors of an empty batch and of a call added
// after Start; the batch started as it was still runs.
func batchMisuse(ctx context.Context, c comm.Communicator, a *arena) (string, error) {
	var empty comm.Batch
	if err := empty.Run(ctx, c); !errors.Is(err, comm.ErrInvalidArgument) {
		return fmt.Sprintf("an empty batch returned %v; want an error wrapping comm.ErrInvalidArgument", err), nil
	}
	x, err := a.buffer(comm.I64, make([]byte, 8*3))
	if err != nil {
		return "", err
	}
	var b comm.Batch
	if err := b.AllReduce(x, x, comm.Sum); err != nil {
		return "", err
	}
	if err := b.Run(ctx, c); err != nil {
		return "", err
	}
	if err := b.Barrier(); !errors.Is(err, comm.ErrInvalidArgument) || b.Len() != 1 {
		return fmt.Sprintf("a Barrier added after Start returned %v and the batch holds %d calls; want an error wrapping comm.ErrInvalidArgument and 1 call", err, b.Len()), nil
	}
	if err := b.Add(comm.Call{Kind: comm.KindSplit}); !errors.Is(err, comm.ErrInvalidArgument) {
		return fmt.Sprintf("adding a Split returned %v; want an error wrapping comm.ErrInvalidArgument", err), nil
	}
	// Started again as it is: the ranks are still aligned.
	return "", b.Run(ctx, c)
}

// batchMissing runs a batch of two AllReduces whose second has no send
// buffer on rank bad, then checks that the first is right everywhere and
// that an AllReduce after it works.
func batchMissing(ctx context.Context, c comm.Communicator, a *arena, bad int, o Options) (string, error) {
	rank, size := c.Rank(), c.Size()
	good := newCase(comm.KindAllReduce, comm.I64, comm.Sum, 5, 0, plain)
	good.rename("Batch/missing buffer/the good AllReduce")
	p, err := prepare(&good, rank, size, o.Memory)
	if err != nil {
		return "", err
	}
	defer p.free()
	bb := &builder{a: a}
	call := allReduce(bb, comm.F32, badN, comm.Sum)
	if rank == bad {
		call.Send = comm.Buffer{}
	}
	if bb.err != nil {
		return "", bb.err
	}
	var b comm.Batch
	if err := errors.Join(b.Add(p.call), b.Add(call)); err != nil {
		return "", err
	}
	err = b.Run(ctx, c)
	var be *comm.BatchError
	var ae *comm.ArgError
	switch {
	case rank == bad && (!errors.As(err, &be) || be.Index != 1 || be.Calls != 2 || !errors.As(err, &ae) || ae.Arg != "send"):
		return fmt.Sprintf("call 1 of the batch had no send buffer: got %v; want a *comm.BatchError naming call 1 of 2 that wraps a *comm.ArgError naming send", err), nil
	case rank != bad && err != nil && (!errors.As(err, &be) || be.Index != 1 || !errors.Is(err, comm.ErrPeerAbandoned) || errors.Is(err, comm.ErrTimeout)):
		return fmt.Sprintf("rank %d's call 1 of the batch had no send buffer; this rank got %v; want a *comm.BatchError naming call 1 with comm.ErrPeerAbandoned", bad, err), nil
	}
	if msg, err := p.verify(); msg != "" || err != nil {
		return msg, err
	}
	after := newCase(comm.KindAllReduce, comm.I64, comm.Sum, 7, 0, plain)
	after.rename("Batch/missing buffer/then AllReduce")
	q, err := prepare(&after, rank, size, o.Memory)
	if err != nil {
		return "", err
	}
	defer q.free()
	if err := q.invoke(ctx, c); err != nil {
		return "", fmt.Errorf("AllReduce after the batch: %w", err)
	}
	return q.verify()
}

// batchMismatch is a batch the ranks disagree on: the calls of each rank,
// and whether the rank starts them on their own instead of as a batch.
type batchMismatch struct {
	name  string
	calls func(b *builder, rank, size int) (calls []comm.Call, single bool)
}

var batchMismatches = []batchMismatch{
	{"one rank has one more collective", func(b *builder, rank, size int) ([]comm.Call, bool) {
		calls := []comm.Call{allReduce(b, comm.F32, mismatchN, comm.Sum)}
		if rank == size-1 {
			calls = append(calls, allReduce(b, comm.F32, mismatchN, comm.Sum))
		}
		return calls, false
	}},
	{"one rank starts the calls on their own", func(b *builder, rank, size int) ([]comm.Call, bool) {
		return []comm.Call{allReduce(b, comm.F32, mismatchN, comm.Sum), broadcast(b, comm.I32, 10, 0)}, rank == 0
	}},
	{"one rank's second collective has another count", func(b *builder, rank, size int) ([]comm.Call, bool) {
		n := mismatchN
		if rank == 0 {
			n -= 24
		}
		return []comm.Call{allReduce(b, comm.F32, mismatchN, comm.Sum), allReduce(b, comm.F32, n, comm.Sum)}, false
	}},
	{"one rank cuts small AllReduces differently", func(b *builder, rank, size int) ([]comm.Call, bool) {
		cut := 64
		if rank == 0 {
			cut = 100
		}
		return []comm.Call{allReduce(b, comm.F32, cut, comm.Sum), allReduce(b, comm.F32, 128-cut, comm.Sum)}, false
	}},
	{"one rank's collectives in another order", func(b *builder, rank, size int) ([]comm.Call, bool) {
		calls := []comm.Call{allReduce(b, comm.F32, mismatchN, comm.Sum), broadcast(b, comm.F32, mismatchN, 0)}
		if rank == size-1 {
			calls[0], calls[1] = calls[1], calls[0]
		}
		return calls, false
	}},
}

func batchMismatchBody(ctx context.Context, c comm.Communicator, mc batchMismatch, name string, o Options, r *report) bool {
	f := newFreshCase(ctx, c, name, o, r)
	if f == nil {
		return false
	}
	defer f.end(name, r)
	child := f.child
	calls, single := mc.calls(f.b, c.Rank(), c.Size())
	if f.b.err != nil {
		r.fail(name, "%v", f.b.err)
		return false
	}
	var err error
	if single {
		var works []*comm.Work
		for _, call := range calls {
			works = append(works, child.Start(ctx, call))
		}
		var errs []error
		for _, w := range works {
			errs = append(errs, w.Wait())
		}
		err = errors.Join(errs...)
	} else {
		var b comm.Batch
		for _, call := range calls {
			if err := b.Add(call); err != nil {
				r.fail(name, "%v", err)
				return false
			}
		}
		err = b.Run(ctx, child)
	}
	how := "a batch of"
	if single {
		how = "on their own"
	}
	if err == nil {
		// A rank whose part only sent may finish before a peer sees the
		// mismatch; the communicator is then aborted and its next call
		// must say why.
		err = child.Barrier(ctx)
		if !errors.Is(err, comm.ErrMismatch) {
			r.fail(name, "this rank started %s %d calls and got no error, and its next call returned %v; want the mismatch (comm.ErrMismatch)", how, len(calls), err)
		}
		return true
	}
	if !errors.Is(err, comm.ErrMismatch) {
		r.fail(name, "this rank started %s %d calls and got %v; want an error wrapping comm.ErrMismatch", how, len(calls), err)
	}
	return true
}

// RunBatch runs BatchRank on every rank of an in-process world. Its
// mismatch cases run on Splits of the world, which they may leave
// aborted.
func RunBatch(t *testing.T, comms []comm.Communicator, opt Options) {
	t.Helper()
	runRankSuite(t, comms, opt, BatchRank)
}
