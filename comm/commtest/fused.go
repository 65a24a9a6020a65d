package commtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// fusedCase is one call of comm.AllReduceFused: the buffer lengths of each
// rank (the same total on every rank) and the dtype and op.
type fusedCase struct {
	name    string
	dt      comm.DType
	op      comm.ReduceOp
	lengths func(rank int) []int
}

var mixedLengths = []int{0, 1, 7, 0, 100, 3, 1000, 0, 33, 5}

func fixed(l []int) func(int) []int { return func(int) []int { return l } }

func fusedCases() []fusedCase {
	var out []fusedCase
	for _, c := range []struct {
		dt comm.DType
		op comm.ReduceOp
	}{{comm.F32, comm.Sum}, {comm.BF16, comm.Max}, {comm.F16, comm.Sum}, {comm.F64, comm.Avg},
		{comm.I64, comm.Prod}, {comm.I32, comm.Sum}, {comm.U8, comm.Min}} {
		out = append(out, fusedCase{fmt.Sprintf("%v/%v/mixed", c.dt, c.op), c.dt, c.op, fixed(mixedLengths)})
	}
	many := make([]int, 200)
	for i := range many {
		many[i] = i * 37 % 13
	}
	out = append(out,
		fusedCase{"f32/sum/split differently on each rank", comm.F32, comm.Sum, func(rank int) []int {
			// The same total, 1149, cut at rank-dependent places.
			cut := (rank*97 + 13) % 1149
			return []int{cut, 0, 1149 - cut}
		}},
		fusedCase{"i64/sum/200 buffers", comm.I64, comm.Sum, fixed(many)},
		fusedCase{"f32/max/all empty", comm.F32, comm.Max, fixed([]int{0, 0, 0})},
		fusedCase{"f32/sum/one large", comm.F32, comm.Sum, fixed([]int{3, 1<<18 + 1})},
	)
	return out
}

// FusedRank checks comm.AllReduceFused on c; every rank of the world must
// call it. Each case reduces a list of buffers of mixed lengths (0
// included) as one collective: element i of the packing (the buffers in
// order) must be the reduction of element i of every rank's packing, also
// when ranks cut the same total into buffers differently. A last case
// passes buffers of two dtypes on one rank: it must get an *comm.ArgError
// naming "bufs[1]", the others comm.ErrPeerAbandoned, and the communicator
// must still work. The buffers are Go memory whatever Options.Memory is:
// AllReduceFused packs on the host.
func FusedRank(ctx context.Context, c comm.Communicator, opt Options) error {
	o := opt.withDefaults()
	o.Memory = hostMemory{}
	rank, size := c.Rank(), c.Size()
	var steps []step
	for _, fc := range fusedCases() {
		steps = append(steps, step{name: "Fused/" + fc.name, run: func(ctx context.Context, a *arena) (string, error) {
			return fusedStep(ctx, c, fc, a)
		}})
	}
	bad := size - 1
	steps = append(steps, step{name: "Fused/mixed dtypes on one rank", run: func(ctx context.Context, a *arena) (string, error) {
		b := &builder{a: a}
		bufs := []comm.Buffer{b.buf(comm.F32, 3), b.buf(comm.F32, 4)}
		if rank == bad {
			bufs[1] = b.buf(comm.F64, 4)
		}
		if b.err != nil {
			return "", b.err
		}
		err := comm.AllReduceFused(ctx, c, bufs, comm.Sum)
		var ae *comm.ArgError
		switch {
		case rank == bad && (!errors.As(err, &ae) || ae.Arg != "bufs[1]"):
			return fmt.Sprintf("bufs[1] has another dtype: got %v; want an *comm.ArgError naming bufs[1]", err), nil
		case rank != bad && (!errors.Is(err, comm.ErrPeerAbandoned) || errors.Is(err, comm.ErrTimeout)):
			return fmt.Sprintf("rank %d passed bad buffers; this rank got %v; want comm.ErrPeerAbandoned", bad, err), nil
		}
		return "", nil
	}})
	after := newCase(comm.KindAllReduce, comm.I64, comm.Sum, 5, 0, plain)
	after.rename("Fused/after the bad buffers, AllReduce/i64/sum/n=5")
	err := runSteps(ctx, c, steps, o, "Fused")
	return errors.Join(err, runCases(ctx, c, []testCase{after}, o, "Fused"))
}

func fusedStep(ctx context.Context, c comm.Communicator, fc fusedCase, a *arena) (string, error) {
	rank, size := c.Rank(), c.Size()
	lengths := fc.lengths(rank)
	total := 0
	for _, n := range lengths {
		total += n
	}
	tc := testCase{kind: comm.KindAllReduce, dt: fc.dt, op: fc.op, n: total}
	tc.rename("Fused/" + fc.name)
	s := newSource(&tc, size)
	es := s.e.size
	in := make([]byte, total*es)
	s.fill(in, rank, 0, total)
	want := s.reduction(fc.op, 0, size, 0, total, size)
	bufs := make([]comm.Buffer, len(lengths))
	off := 0
	for j, n := range lengths {
		b, err := a.buffer(fc.dt, in[off*es:(off+n)*es])
		if err != nil {
			return "", err
		}
		bufs[j] = b
		off += n
	}
	if err := comm.AllReduceFused(ctx, c, bufs, fc.op); err != nil {
		return "", err
	}
	var wrong []string
	off = 0
	for j, n := range lengths {
		got, err := a.read(bufs[j])
		if err != nil {
			return "", err
		}
		if msg := compare(s.e, got, want[off*es:(off+n)*es]); msg != "" {
			wrong = append(wrong, fmt.Sprintf("bufs[%d] (elements %d…%d of the packing): %s", j, off, off+n, msg))
		}
		off += n
	}
	if len(wrong) > 3 {
		wrong = append(wrong[:3], fmt.Sprintf("and %d more buffers", len(wrong)-3))
	}
	return strings.Join(wrong, "; "), nil
}

// RunFused runs FusedRank on every rank of an in-process world.
func RunFused(t *testing.T, comms []comm.Communicator, opt Options) {
	t.Helper()
	runRankSuite(t, comms, opt, FusedRank)
}
