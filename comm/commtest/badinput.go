package commtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// badCase is one bad argument: the bad rank's call has it, the others'
// calls are good (and, for point-to-point cases, the others call nothing).
type badCase struct {
	name    string
	arg     string // what the bad rank's *comm.ArgError must name; "x[" matches "x[0]", "x[1]", …
	p2p     bool
	minSize int
	call    func(b *builder, rank, size, bad int) comm.Call
}

// builder allocates the buffers of a call and keeps the first error.
type builder struct {
	a   *arena
	err error
}

func (b *builder) buf(dt comm.DType, n int) comm.Buffer {
	if n < 0 {
		n = 0
	}
	init := make([]byte, n*dt.Size())
	garbage(init, uint64(n))
	buf, err := b.a.buffer(dt, init)
	if b.err == nil {
		b.err = err
	}
	return buf
}

func ones(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

const badN = 8 // the count of the bad-input cases

var badCases = []badCase{
	{name: "AllReduce/recv-length", arg: "recv", call: func(b *builder, rank, size, bad int) comm.Call {
		extra := 0
		if rank == bad {
			extra = 1
		}
		return comm.Call{Kind: comm.KindAllReduce, Send: b.buf(comm.F32, badN), Recv: b.buf(comm.F32, badN+extra), Op: comm.Sum}
	}},
	{name: "AllReduce/avg-on-i32", arg: "op", call: func(b *builder, rank, size, bad int) comm.Call {
		op := comm.Sum
		if rank == bad {
			op = comm.Avg
		}
		return comm.Call{Kind: comm.KindAllReduce, Send: b.buf(comm.I32, badN), Recv: b.buf(comm.I32, badN), Op: op}
	}},
	{name: "AllReduce/bxor-on-f32", arg: "op", call: func(b *builder, rank, size, bad int) comm.Call {
		op := comm.Sum
		if rank == bad {
			op = comm.BXor
		}
		return comm.Call{Kind: comm.KindAllReduce, Send: b.buf(comm.F32, badN), Recv: b.buf(comm.F32, badN), Op: op}
	}},
	{name: "AllReduce/premulsum-on-i32", arg: "op", call: func(b *builder, rank, size, bad int) comm.Call {
		c := comm.Call{Kind: comm.KindAllReduce, Send: b.buf(comm.I32, badN), Recv: b.buf(comm.I32, badN), Op: comm.Sum}
		if rank == bad {
			c.Op, c.Scalar = comm.PreMulSum, 2
		}
		return c
	}},
	{name: "AllReduce/premulsum-without-factor", arg: "scalar", call: func(b *builder, rank, size, bad int) comm.Call {
		c := comm.Call{Kind: comm.KindAllReduce, Send: b.buf(comm.F32, badN), Recv: b.buf(comm.F32, badN), Op: comm.PreMulSum, Scalar: 0.5}
		if rank == bad {
			c.Scalar = 0
		}
		return c
	}},
	{name: "AllReduce/factor-with-sum", arg: "scalar", call: func(b *builder, rank, size, bad int) comm.Call {
		c := comm.Call{Kind: comm.KindAllReduce, Send: b.buf(comm.F32, badN), Recv: b.buf(comm.F32, badN), Op: comm.Sum}
		if rank == bad {
			c.Scalar = 2
		}
		return c
	}},
	{name: "AllReduce/invalid-op", arg: "op", call: func(b *builder, rank, size, bad int) comm.Call {
		op := comm.Sum
		if rank == bad {
			op = 0
		}
		return comm.Call{Kind: comm.KindAllReduce, Send: b.buf(comm.F32, badN), Recv: b.buf(comm.F32, badN), Op: op}
	}},
	{name: "AllReduce/partial-overlap", arg: "recv", call: func(b *builder, rank, size, bad int) comm.Call {
		if rank == bad {
			x := b.buf(comm.F32, badN+1)
			if b.err != nil {
				return comm.Call{}
			}
			return comm.Call{Kind: comm.KindAllReduce, Send: x.Slice(0, badN), Recv: x.Slice(1, badN), Op: comm.Sum}
		}
		return comm.Call{Kind: comm.KindAllReduce, Send: b.buf(comm.F32, badN), Recv: b.buf(comm.F32, badN), Op: comm.Sum}
	}},
	{name: "AllReduce/missing-send", arg: "send", call: func(b *builder, rank, size, bad int) comm.Call {
		c := comm.Call{Kind: comm.KindAllReduce, Send: b.buf(comm.F32, badN), Recv: b.buf(comm.F32, badN), Op: comm.Sum}
		if rank == bad {
			c.Send = comm.Buffer{}
		}
		return c
	}},
	{name: "AllReduce/recv-dtype", arg: "recv", call: func(b *builder, rank, size, bad int) comm.Call {
		dt := comm.F32
		if rank == bad {
			dt = comm.F64
		}
		return comm.Call{Kind: comm.KindAllReduce, Send: b.buf(comm.F32, badN), Recv: b.buf(dt, badN), Op: comm.Sum}
	}},
	{name: "Reduce/root-out-of-range", arg: "root", call: func(b *builder, rank, size, bad int) comm.Call {
		root := 0
		if rank == bad {
			root = size
		}
		return comm.Call{Kind: comm.KindReduce, Send: b.buf(comm.F32, badN), Recv: b.buf(comm.F32, badN), Op: comm.Sum, Root: root}
	}},
	{name: "Broadcast/root-negative", arg: "root", call: func(b *builder, rank, size, bad int) comm.Call {
		root := 0
		if rank == bad {
			root = -1
		}
		x := b.buf(comm.F32, badN)
		return comm.Call{Kind: comm.KindBroadcast, Send: x, Recv: x, Root: root}
	}},
	{name: "Broadcast/not-in-place", arg: "buf", call: func(b *builder, rank, size, bad int) comm.Call {
		x := b.buf(comm.F32, badN)
		c := comm.Call{Kind: comm.KindBroadcast, Send: x, Recv: x}
		if rank == bad {
			c.Recv = b.buf(comm.F32, badN)
		}
		return c
	}},
	{name: "AllGather/recv-length", arg: "recv", call: func(b *builder, rank, size, bad int) comm.Call {
		less := 0
		if rank == bad {
			less = 1
		}
		return comm.Call{Kind: comm.KindAllGather, Send: b.buf(comm.F32, badN), Recv: b.buf(comm.F32, size*badN-less)}
	}},
	{name: "ReduceScatter/send-length", arg: "send", call: func(b *builder, rank, size, bad int) comm.Call {
		extra := 0
		if rank == bad {
			extra = 1
		}
		return comm.Call{Kind: comm.KindReduceScatter, Send: b.buf(comm.F32, size*badN+extra), Recv: b.buf(comm.F32, badN), Op: comm.Max}
	}},
	{name: "AllToAll/not-a-multiple", arg: "send", minSize: 2, call: func(b *builder, rank, size, bad int) comm.Call {
		m := size * badN
		if rank == bad {
			m++
		}
		return comm.Call{Kind: comm.KindAllToAll, Send: b.buf(comm.F32, m), Recv: b.buf(comm.F32, m)}
	}},
	{name: "AllToAll/in-place", arg: "recv", call: func(b *builder, rank, size, bad int) comm.Call {
		c := comm.Call{Kind: comm.KindAllToAll, Send: b.buf(comm.F32, size*badN), Recv: b.buf(comm.F32, size*badN)}
		if rank == bad {
			c.Recv = c.Send
		}
		return c
	}},
	{name: "AllToAllV/counts-length", arg: "sendCounts", call: func(b *builder, rank, size, bad int) comm.Call {
		c := comm.Call{Kind: comm.KindAllToAllV, Send: b.buf(comm.F32, size), Recv: b.buf(comm.F32, size), SendCounts: ones(size), RecvCounts: ones(size)}
		if rank == bad {
			c.SendCounts = ones(size + 1)
		}
		return c
	}},
	{name: "AllToAllV/negative-count", arg: "sendCounts[", call: func(b *builder, rank, size, bad int) comm.Call {
		c := comm.Call{Kind: comm.KindAllToAllV, Send: b.buf(comm.F32, size), Recv: b.buf(comm.F32, size), SendCounts: ones(size), RecvCounts: ones(size)}
		if rank == bad {
			c.SendCounts[0] = -1
		}
		return c
	}},
	{name: "Gather/root-recv-length", arg: "recv", call: func(b *builder, rank, size, bad int) comm.Call {
		c := comm.Call{Kind: comm.KindGather, Send: b.buf(comm.F32, badN), Root: bad}
		if rank == bad {
			c.Recv = b.buf(comm.F32, size*badN+1)
		}
		return c
	}},
	{name: "Scatter/root-send-length", arg: "send", call: func(b *builder, rank, size, bad int) comm.Call {
		c := comm.Call{Kind: comm.KindScatter, Recv: b.buf(comm.F32, badN), Root: bad}
		if rank == bad {
			c.Send = b.buf(comm.F32, size*badN-1)
		}
		return c
	}},
	{name: "Scan/avg", arg: "op", call: func(b *builder, rank, size, bad int) comm.Call {
		op := comm.Sum
		if rank == bad {
			op = comm.Avg
		}
		return comm.Call{Kind: comm.KindScan, Send: b.buf(comm.F32, badN), Recv: b.buf(comm.F32, badN), Op: op}
	}},
	{name: "ExScan/recv-length", arg: "recv", call: func(b *builder, rank, size, bad int) comm.Call {
		m := badN
		if rank == bad {
			m--
		}
		return comm.Call{Kind: comm.KindExScan, Send: b.buf(comm.I64, badN), Recv: b.buf(comm.I64, m), Op: comm.Sum}
	}},
	{name: "Send/peer-out-of-range", arg: "peer", p2p: true, call: func(b *builder, rank, size, bad int) comm.Call {
		return comm.Call{Kind: comm.KindSend, Send: b.buf(comm.F32, badN), Peer: size}
	}},
	{name: "Recv/peer-negative", arg: "peer", p2p: true, call: func(b *builder, rank, size, bad int) comm.Call {
		return comm.Call{Kind: comm.KindRecv, Recv: b.buf(comm.F32, badN), Peer: -1}
	}},
	{name: "Send/tag-negative", arg: "tag", p2p: true, call: func(b *builder, rank, size, bad int) comm.Call {
		return comm.Call{Kind: comm.KindSend, Send: b.buf(comm.F32, badN), Peer: bad, Tag: -1}
	}},
}

// BadInputRank checks the handling of arguments that are wrong on their
// own; every rank of the world must call it. For each case one rank (a
// different one each time) passes a bad argument: a wrong length, a root or
// peer out of range, Avg on i32 or for Scan, an invalid op, partially
// overlapping send and recv, a missing buffer, a Broadcast that is not in
// place, an AllToAll in place, bad AllToAllV counts. That rank must get an
// error with errors.Is(err, comm.ErrInvalidArgument) whose *comm.ArgError
// names the argument as tier.Validate does; every other rank of a
// collective must either finish (its part needed nothing from the bad rank)
// or get an error with errors.Is(err, comm.ErrPeerAbandoned) — not a
// timeout: they must be told, not wait — within Options.Timeout.
// After each case an AllReduce on every rank must succeed and be right.
func BadInputRank(ctx context.Context, c comm.Communicator, opt Options) error {
	o := opt.withDefaults()
	rank, size := c.Rank(), c.Size()
	r := newReport("BadInput", rank, o)
	for i, bc := range badCases {
		if size < bc.minSize {
			continue
		}
		if err := ctx.Err(); err != nil {
			r.stopped = fmt.Sprintf("stopped before %s: %v", bc.name, err)
			break
		}
		bad := i % size
		if bc.p2p && rank != bad {
			r.ran++
		} else {
			r.ran++
			if !badStep(ctx, c, bc, bad, o, r) {
				r.stopped = fmt.Sprintf("stopped after %s", bc.name)
				break
			}
		}
		// The communicator must still work, on every rank.
		tc := newCase(comm.KindAllReduce, comm.I64, comm.Sum, 5, 0, plain)
		tc.name = "BadInput/" + bc.name + ", then " + tc.name
		r.ran++
		if !runCase(ctx, c, &tc, o, r) {
			r.stopped = fmt.Sprintf("stopped after %s: the communicator no longer works", bc.name)
			break
		}
	}
	o.Log("commtest BadInput: rank %d: %d checks, %d failed%s", rank, r.ran, r.failed, r.margin())
	return r.err()
}

// badStep runs one case; it reports false when the run must stop.
func badStep(ctx context.Context, c comm.Communicator, bc badCase, bad int, o Options, r *report) bool {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	return guard(ctx, r, "BadInput/"+bc.name, o, func(r *report) bool {
		badBody(ctx, c, bc, bad, o, r)
		return true
	})
}

func badBody(ctx context.Context, c comm.Communicator, bc badCase, bad int, o Options, r *report) {
	a := &arena{mem: o.Memory}
	defer a.free()
	rank, size := c.Rank(), c.Size()
	name := "BadInput/" + bc.name
	b := &builder{a: a}
	call := bc.call(b, rank, size, bad)
	if b.err != nil {
		r.fail(name, "%v", b.err)
		return
	}
	err := c.Start(ctx, call).Wait()
	if rank == bad {
		var ae *comm.ArgError
		switch {
		case err == nil:
			r.fail(name, "the bad call (rank %d) returned no error; want an *comm.ArgError naming %q", bad, bc.arg)
		case !errors.Is(err, comm.ErrInvalidArgument) || !errors.As(err, &ae):
			r.fail(name, "the bad call returned %v; want an *comm.ArgError (comm.ErrInvalidArgument) naming %q", err, bc.arg)
		case ae.Arg != bc.arg && !(strings.HasSuffix(bc.arg, "[") && strings.HasPrefix(ae.Arg, bc.arg)):
			r.fail(name, "the *comm.ArgError names %q; want %q (%v)", ae.Arg, bc.arg, err)
		case ae.Kind != call.Kind:
			r.fail(name, "the *comm.ArgError is for %v; want %v (%v)", ae.Kind, call.Kind, err)
		}
		return
	}
	switch {
	case err == nil:
		// A rank whose part needs nothing from the bad rank (it only
		// sends, or its frames had all arrived) may finish; what matters
		// is that no rank waits for the bad one.
	case errors.Is(err, comm.ErrTimeout) || errors.Is(err, comm.ErrCanceled):
		r.fail(name, "rank %d passed a bad argument and this rank waited until its context ended: %v; want comm.ErrPeerAbandoned at once", bad, err)
	case !errors.Is(err, comm.ErrPeerAbandoned):
		r.fail(name, "rank %d passed a bad argument; this rank got %v; want an error with errors.Is(err, comm.ErrPeerAbandoned)", bad, err)
	}
}

// RunBadInput runs BadInputRank on every rank of an in-process world.
func RunBadInput(t *testing.T, comms []comm.Communicator, opt Options) {
	t.Helper()
	runRankSuite(t, comms, opt, BadInputRank)
}
