package nexar

import (
	"github.com/hiercomm/hiercomm/comm"
)

// kernel is what the reducing schedules need: the element size, the
// in-place reduction, and whether to divide by the size at the end (Avg).
type kernel struct {
	dt  comm.DType
	es  int
	op  comm.ReduceOp
	red func(dst, src []byte)
	avg bool
}

func newKernel(dt comm.DType, op comm.ReduceOp) (kernel, error) {
	red, err := comm.ReduceFunc(dt, op)
	if err != nil {
		return kernel{}, err
	}
	return kernel{dt: dt, es: dt.Size(), op: op, red: red, avg: op == comm.Avg}, nil
}

// runCollective executes a validated call on this rank.
func runCollective(o *op, c comm.Call) error {
	P, r := o.size(), o.rank()
	send, recv := c.Send.Bytes(), c.Recv.Bytes()
	es := max(1, c.Send.DType().Size(), c.Recv.DType().Size())
	var k kernel
	if c.Kind.Reduces() {
		dt := c.Send.DType()
		if c.Kind == comm.KindReduceScatter {
			dt = c.Recv.DType()
		}
		var err error
		if k, err = newKernel(dt, c.Op); err != nil {
			return err
		}
	}
	switch c.Kind {
	case comm.KindAllReduce:
		copyIfApart(recv, send)
		return allReduce(o, recv, k)
	case comm.KindBroadcast:
		return broadcast(o, recv, c.Root, es)
	case comm.KindReduce:
		return reduce(o, send, recv, c.Root, k)
	case comm.KindAllGather:
		n := len(send)
		copyIfApart(recv[r*n:(r+1)*n], send)
		return ringAllGather(o, recv, es)
	case comm.KindReduceScatter:
		return ringReduceScatter(o, send, recv, k)
	case comm.KindAllToAll:
		n := len(send) / P
		counts := make([]int, P)
		for i := range counts {
			counts[i] = n / es
		}
		return allToAll(o, send, counts, recv, counts, es, false)
	case comm.KindAllToAllV:
		return allToAll(o, send, c.SendCounts, recv, c.RecvCounts, es, true)
	case comm.KindGather:
		return gather(o, send, recv, c.Root, es)
	case comm.KindScatter:
		return scatter(o, send, recv, c.Root, es)
	case comm.KindScan:
		return scan(o, send, recv, k, false)
	case comm.KindExScan:
		return scan(o, send, recv, k, true)
	case comm.KindBarrier:
		return barrier(o)
	}
	return &comm.ArgError{Kind: c.Kind, Arg: "kind", Problem: "not a collective"}
}

// copyIfApart copies src into dst unless they are the same memory (an
// in-place call).
func copyIfApart(dst, src []byte) {
	if len(dst) == 0 || &dst[0] == &src[0] {
		return
	}
	copy(dst, src)
}
