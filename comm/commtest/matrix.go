package commtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// The cross-route mismatch matrix: for every ordered pair of kinds (A, B)
// among MatrixKinds, one rank (the odd one) calls B while the others call
// A. On a composed communicator the two calls may take different routes
// (a Broadcast through the world part, an AllReduce through the nodes and
// the rails), so no part ever sees both: only a communicator that asks its
// peers which call they are in finds the mismatch before the deadline.

// MatrixKinds are the kinds the matrix pairs.
var MatrixKinds = []comm.Kind{
	comm.KindAllReduce, comm.KindBroadcast, comm.KindReduce, comm.KindAllGather,
	comm.KindReduceScatter, comm.KindAllToAll, comm.KindBarrier, comm.KindScan,
}

// MatrixCounts are the per-rank counts of the matrix when Options.Counts is
// nil: one element, a thousand, and one that crosses many chunks of a
// pipelined path.
var MatrixCounts = []int{1, 1000, 70001}

// MatrixWithin is how long a case may take on a rank when
// Options.MismatchWithin is zero: from the mismatched call to the error
// (or, where this rank's part only sent, to the error of its next call).
const MatrixWithin = 2 * time.Second

// matrixCase is one cell: the others call A, rank odd calls B, n elements.
type matrixCase struct {
	a, b comm.Kind
	odd  int
	n    int
}

func (mc matrixCase) name() string {
	return fmt.Sprintf("Matrix/%v-vs-%v/odd=%d/n=%d", mc.a, mc.b, mc.odd, mc.n)
}

// matrixCases lists the cells: every ordered pair of distinct kinds, with
// the odd rank and the count going round the ranks and the counts from
// cell to cell (Options.FullMatrix: every count with every rank as the
// odd one, for every pair).
func matrixCases(o Options, counts []int, size int) []matrixCase {
	var out []matrixCase
	i := 0
	for _, a := range MatrixKinds {
		for _, b := range MatrixKinds {
			if a == b {
				continue
			}
			if !o.FullMatrix {
				out = append(out, matrixCase{a, b, (i + 1) % size, counts[i%len(counts)]})
				i++
				continue
			}
			for _, n := range counts {
				for odd := range size {
					out = append(out, matrixCase{a, b, odd, n})
				}
			}
		}
	}
	return out
}

// matrixCall is a call of kind k with n elements per rank on a world of
// size ranks; rooted kinds use root 0.
func matrixCall(b *builder, k comm.Kind, n, size int) comm.Call {
	switch k {
	case comm.KindAllReduce:
		return allReduce(b, comm.F32, n, comm.Sum)
	case comm.KindBroadcast:
		return broadcast(b, comm.F32, n, 0)
	case comm.KindReduce:
		return comm.Call{Kind: k, Send: b.buf(comm.F32, n), Recv: b.buf(comm.F32, n), Op: comm.Sum, Root: 0}
	case comm.KindAllGather:
		return comm.Call{Kind: k, Send: b.buf(comm.F32, n), Recv: b.buf(comm.F32, size*n)}
	case comm.KindReduceScatter:
		return comm.Call{Kind: k, Send: b.buf(comm.F32, size*n), Recv: b.buf(comm.F32, n), Op: comm.Sum}
	case comm.KindAllToAll:
		return comm.Call{Kind: k, Send: b.buf(comm.F32, size*n), Recv: b.buf(comm.F32, size*n)}
	case comm.KindScan:
		return comm.Call{Kind: k, Send: b.buf(comm.F32, n), Recv: b.buf(comm.F32, n), Op: comm.Sum}
	}
	return comm.Call{Kind: comm.KindBarrier}
}

// MismatchMatrixRank runs the cross-route mismatch matrix on one rank;
// every rank of the world must call it with equal Options, and the world
// must have 2 ranks or more (with one rank it returns nil at once). Each
// cell runs on a fresh Split of c (every rank, color 0, key rank): first
// a matched AllReduce of one element (collective #1), then the mismatched
// call (collective #2). Every rank must return, within
// Options.MismatchWithin (MatrixWithin if zero) of starting that call, a
// *comm.MismatchError (errors.Is comm.ErrMismatch) whose Local is its own
// call's Signature and whose Seq is 2 — or nil, where its part only sent
// and finished before any peer could object, after which its next call
// must report the mismatch within the same bound.
//
// Options.Counts are the per-rank counts (MatrixCounts if nil; zero counts
// are left out: every kind with no elements agrees with a Barrier on what
// moves). By default each of the 56 pairs runs once, the odd rank and the
// count going round from pair to pair; Options.FullMatrix runs every pair
// with every count and every rank as the odd one.
func MismatchMatrixRank(ctx context.Context, c comm.Communicator, opt Options) error {
	counts := opt.Counts
	if counts == nil {
		counts = MatrixCounts
	}
	o := opt.withDefaults()
	rank, size := c.Rank(), c.Size()
	r := newReport("MismatchMatrix", rank, o)
	if size < 2 {
		return nil
	}
	var nonzero []int
	for _, n := range counts {
		if n > 0 {
			nonzero = append(nonzero, n)
		}
	}
	if len(nonzero) == 0 {
		return fmt.Errorf("commtest: MismatchMatrix needs a positive count (Options.Counts %v)", counts)
	}
	within := o.MismatchWithin
	if within <= 0 {
		within = MatrixWithin
	}
	for _, mc := range matrixCases(o, nonzero, size) {
		r.ran++
		if !matrixStep(ctx, c, mc, within, o, r) {
			r.stopped = "stopped after " + mc.name()
			break
		}
	}
	o.Log("commtest MismatchMatrix: rank %d: %d cases, %d failed%s", rank, r.ran, r.failed, r.margin())
	return r.err()
}

func matrixStep(ctx context.Context, c comm.Communicator, mc matrixCase, within time.Duration, o Options, r *report) bool {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	return guard(ctx, r, mc.name(), o, func(r *report) bool { return matrixBody(ctx, c, mc, within, o, r) })
}

func matrixBody(ctx context.Context, c comm.Communicator, mc matrixCase, within time.Duration, o Options, r *report) bool {
	name := mc.name()
	rank, size := c.Rank(), c.Size()
	f := newFreshCase(ctx, c, name, o, r)
	if f == nil {
		return false
	}
	defer f.end(name, r)
	child, b := f.child, f.b
	warm := allReduce(b, comm.F32, 1, comm.Sum)
	kind := mc.a
	if rank == mc.odd {
		kind = mc.b
	}
	call := matrixCall(b, kind, mc.n, size)
	if b.err != nil {
		r.fail(name, "%v", b.err)
		return false
	}
	if err := child.Start(ctx, warm).Wait(); err != nil {
		r.callFailed(name+" (the matched AllReduce before it)", err)
		return false
	}
	start := time.Now()
	err := child.Start(ctx, call).Wait()
	next := ""
	if err == nil {
		// This rank's part only sent, and it finished before a peer saw
		// the mismatch: the communicator is aborted, and its next call
		// must say why.
		next = " (its next call, a Barrier, after the call returned nil)"
		err = child.Barrier(ctx)
	}
	took := time.Since(start)
	var me *comm.MismatchError
	switch {
	case !errors.Is(err, comm.ErrMismatch) || !errors.As(err, &me):
		r.fail(name, "this rank called %v and got%s %v after %v; want a *comm.MismatchError (comm.ErrMismatch)", call.Signature(), next, err, took.Round(time.Millisecond))
	case next == "" && me.Local != call.Signature():
		r.fail(name, "MismatchError.Local is %v; this rank called %v (%v)", me.Local, call.Signature(), err)
	case me.Seq != 2:
		r.fail(name, "MismatchError.Seq is %d; the mismatched call was collective #2 (%v)", me.Seq, err)
	case took > within:
		r.fail(name, "this rank called %v and got the mismatch%s after %v, beyond %v: %v", call.Signature(), next, took.Round(time.Millisecond), within, err)
	}
	return true
}

// RunMismatchMatrix runs MismatchMatrixRank on every rank of an in-process
// world. The communicators may be unusable afterwards: give it a world you
// then Close.
func RunMismatchMatrix(t *testing.T, comms []comm.Communicator, opt Options) {
	t.Helper()
	if len(comms) < 2 {
		t.Skip("commtest: RunMismatchMatrix needs 2 ranks or more")
	}
	runRankSuite(t, comms, opt, MismatchMatrixRank)
}
