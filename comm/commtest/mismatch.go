package commtest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// mismatchCase is a collective that the ranks disagree on.
type mismatchCase struct {
	name string
	call func(b *builder, rank, size int) comm.Call
}

const mismatchN = 1024

func allReduce(b *builder, dt comm.DType, n int, op comm.ReduceOp) comm.Call {
	return comm.Call{Kind: comm.KindAllReduce, Send: b.buf(dt, n), Recv: b.buf(dt, n), Op: op}
}

func broadcast(b *builder, dt comm.DType, n, root int) comm.Call {
	x := b.buf(dt, n)
	return comm.Call{Kind: comm.KindBroadcast, Send: x, Recv: x, Root: root}
}

var mismatchCases = []mismatchCase{
	{"AllReduce vs Broadcast", func(b *builder, rank, size int) comm.Call {
		if rank == 0 {
			return allReduce(b, comm.F32, mismatchN, comm.Sum)
		}
		return broadcast(b, comm.F32, mismatchN, 0)
	}},
	{"counts differ", func(b *builder, rank, size int) comm.Call {
		if rank == size-1 {
			return allReduce(b, comm.F32, mismatchN-24, comm.Sum)
		}
		return allReduce(b, comm.F32, mismatchN, comm.Sum)
	}},
	{"dtypes differ", func(b *builder, rank, size int) comm.Call {
		if rank == 0 {
			return allReduce(b, comm.F64, mismatchN, comm.Sum)
		}
		return allReduce(b, comm.F32, mismatchN, comm.Sum)
	}},
	{"ops differ", func(b *builder, rank, size int) comm.Call {
		if rank == 1 {
			return allReduce(b, comm.F32, mismatchN, comm.Max)
		}
		return allReduce(b, comm.F32, mismatchN, comm.Sum)
	}},
	{"premulsum vs sum", func(b *builder, rank, size int) comm.Call {
		// The factors may differ (each rank's own); the op may not.
		c := allReduce(b, comm.F32, mismatchN, comm.Sum)
		if rank == 1 {
			c.Op, c.Scalar = comm.PreMulSum, 0.5
		}
		return c
	}},
	{"roots differ", func(b *builder, rank, size int) comm.Call {
		if rank == 0 {
			return broadcast(b, comm.F32, mismatchN, 0)
		}
		return broadcast(b, comm.F32, mismatchN, size-1)
	}},
	{"Gather vs Scatter", func(b *builder, rank, size int) comm.Call {
		if rank == 0 {
			return comm.Call{Kind: comm.KindGather, Send: b.buf(comm.F32, mismatchN), Recv: b.buf(comm.F32, size*mismatchN), Root: 0}
		}
		return comm.Call{Kind: comm.KindScatter, Recv: b.buf(comm.F32, mismatchN), Root: 0}
	}},
}

// MismatchRank checks that ranks which disagree on a collective are told so;
// every rank of the world must call it, and the world must have 2 ranks or
// more (with one rank it returns nil at once). Each case runs on a fresh
// Split of c (every rank, color 0, key rank), closed afterwards: rank 0
// calls AllReduce(1024×f32) while the others call Broadcast; one rank's
// count differs; dtypes differ; ops differ; rank 1 calls PreMulSum where
// the others call Sum; roots differ; rank 0 calls
// Gather while the others call Scatter. Every rank must return, within
// Options.Timeout, an error with errors.Is(err, comm.ErrMismatch) whose
// *comm.MismatchError has Local equal to its own call's Signature — or, if
// its part only sent and so finished before any peer could object, nil,
// after which its next call on that communicator must report the mismatch.
//
// A mismatch may abort the communicator it happens on, so c must only be
// able to Split after a child's mismatch (as the contract requires: a
// child never affects its parent); callers should still treat c as spent
// and Close it afterwards.
func MismatchRank(ctx context.Context, c comm.Communicator, opt Options) error {
	o := opt.withDefaults()
	rank, size := c.Rank(), c.Size()
	r := newReport("Mismatch", rank, o)
	if size < 2 {
		return nil
	}
	for _, mc := range mismatchCases {
		name := "Mismatch/" + mc.name
		r.ran++
		if !mismatchStep(ctx, c, mc, name, o, r) {
			r.stopped = fmt.Sprintf("stopped after %s", mc.name)
			break
		}
	}
	o.Log("commtest Mismatch: rank %d: %d cases, %d failed%s", rank, r.ran, r.failed, r.margin())
	return r.err()
}

// mismatchStep runs one case and reports false when the run must stop.
func mismatchStep(ctx context.Context, c comm.Communicator, mc mismatchCase, name string, o Options, r *report) bool {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	return guard(ctx, r, name, o, func(r *report) bool { return mismatchBody(ctx, c, mc, name, o, r) })
}

func mismatchBody(ctx context.Context, c comm.Communicator, mc mismatchCase, name string, o Options, r *report) bool {
	rank, size := c.Rank(), c.Size()
	f := newFreshCase(ctx, c, name, o, r)
	if f == nil {
		return false
	}
	defer f.end(name, r)
	child, b := f.child, f.b
	call := mc.call(b, rank, size)
	if b.err != nil {
		r.fail(name, "%v", b.err)
		return false
	}
	err := child.Start(ctx, call).Wait()
	if err == nil {
		// A rank whose part of the collective only sends may finish before
		// a peer sees the mismatch; the communicator is then aborted and
		// its next call must say why.
		err = child.Barrier(ctx)
		if !errors.Is(err, comm.ErrMismatch) {
			r.fail(name, "this rank called %v and returned no error, and its next call returned %v; want the mismatch (comm.ErrMismatch)", call.Signature(), err)
		}
		return true
	}
	var me *comm.MismatchError
	switch {
	case !errors.Is(err, comm.ErrMismatch) || !errors.As(err, &me):
		r.fail(name, "this rank called %v and got %v; want a *comm.MismatchError (comm.ErrMismatch)", call.Signature(), err)
	case me.Local != call.Signature():
		r.fail(name, "MismatchError.Local is %v; this rank called %v (%v)", me.Local, call.Signature(), err)
	}
	return true
}

// freshCase is what a case that may spoil its communicator runs on: a
// Split of c (every rank, color 0, key rank), and a builder of its
// buffers. end, deferred, frees the buffers and closes the child (but
// where the case closed it itself: closed), reporting a failure to close.
type freshCase struct {
	child  comm.Communicator
	b      *builder
	closed bool
}

// newFreshCase makes case name's freshCase; nil, after reporting why,
// when the Split failed.
func newFreshCase(ctx context.Context, c comm.Communicator, name string, o Options, r *report) *freshCase {
	child, err := c.Split(ctx, 0, c.Rank())
	if err != nil {
		r.callFailed(name+" (Split for a fresh communicator)", err)
		return nil
	}
	if child == nil {
		r.fail(name, "Split(0, %d) returned no communicator", c.Rank())
		return nil
	}
	return &freshCase{child: child, b: &builder{a: &arena{mem: o.Memory}}}
}

func (f *freshCase) end(name string, r *report) {
	f.b.a.free()
	if f.closed {
		return
	}
	if err := f.child.Close(); err != nil {
		r.fail(name, "Close of the child after the case: %v", err)
	}
}

// RunMismatch runs MismatchRank on every rank of an in-process world. The
// communicators may be unusable afterwards: give it a world you then Close.
func RunMismatch(t *testing.T, comms []comm.Communicator, opt Options) {
	t.Helper()
	if len(comms) < 2 {
		t.Skip("commtest: RunMismatch needs 2 ranks or more")
	}
	runRankSuite(t, comms, opt, MismatchRank)
}
