package bench

import (
	"context"
	"fmt"
	"slices"

	"github.com/hiercomm/hiercomm/comm"
)

// opDef is one measurable operation: its buffers for a size, its bus
// bandwidth factor, and how to run it once.
type opDef struct {
	name string
	kind comm.Kind // comm.KindSend stands for sendrecv
	// perRank: the size is P blocks of the per-rank count (AllGather's
	// receive, ReduceScatter's and AllToAll's send), so it is rounded to a
	// multiple of P elements.
	perRank bool
	// busFactor is busbw / algbw on P ranks, nccl-tests' formula: the
	// fraction of the size that crosses the busiest link of an ideal
	// algorithm, so busbw is comparable with the link bandwidth.
	busFactor func(p float64) float64
	// viaAllReduce: a ReduceScatter composed as a full AllReduce into a
	// scratch buffer and a copy of this rank's block (what numr does),
	// measured against the communicator's own ReduceScatter.
	viaAllReduce bool
}

var opDefs = map[string]opDef{
	"allreduce":     {name: "allreduce", kind: comm.KindAllReduce, busFactor: func(p float64) float64 { return 2 * (p - 1) / p }},
	"allgather":     {name: "allgather", kind: comm.KindAllGather, perRank: true, busFactor: func(p float64) float64 { return (p - 1) / p }},
	"reducescatter": {name: "reducescatter", kind: comm.KindReduceScatter, perRank: true, busFactor: func(p float64) float64 { return (p - 1) / p }},
	"alltoall":      {name: "alltoall", kind: comm.KindAllToAll, perRank: true, busFactor: func(p float64) float64 { return (p - 1) / p }},
	"broadcast":     {name: "broadcast", kind: comm.KindBroadcast, busFactor: func(float64) float64 { return 1 }},
	"reduce":        {name: "reduce", kind: comm.KindReduce, busFactor: func(float64) float64 { return 1 }},
	"sendrecv":      {name: "sendrecv", kind: comm.KindSend, busFactor: func(float64) float64 { return 1 }},
	// reducescatter_ar is ReduceScatter's result by AllReduce then copy; its
	// busbw uses ReduceScatter's factor, so the two compare directly.
	"reducescatter_ar": {name: "reducescatter_ar", kind: comm.KindReduceScatter, perRank: true, viaAllReduce: true,
		busFactor: func(p float64) float64 { return (p - 1) / p }},
}

// OpNames lists the operations a Spec may name, sorted.
func OpNames() []string {
	names := make([]string, 0, len(opDefs))
	for n := range opDefs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// BusFactor is busbw / algbw for op on p ranks (nccl-tests' factors):
// 2(p−1)/p for allreduce; (p−1)/p for allgather, reducescatter and alltoall;
// 1 for broadcast, reduce and sendrecv. It returns 0 for an unknown op.
func BusFactor(op string, p int) float64 {
	def, ok := opDefs[op]
	if !ok || p < 1 {
		return 0
	}
	return def.busFactor(float64(p))
}

// reduces reports whether the op takes the Spec's ReduceOp.
func (d opDef) reduces() bool { return d.kind.Reduces() }

// rooted reports whether the op has a root.
func (d opDef) rooted() bool { return d.kind.Rooted() }

// unitBytes is the granularity of the op's sizes on p ranks.
func (d opDef) unitBytes(es, p int) int64 {
	if d.perRank {
		return int64(es * p)
	}
	return int64(es)
}

// sizesFor rounds the sweep to the op's unit and drops sizes that round to
// zero or to the previous size.
func (d opDef) sizesFor(s Spec, p int) []int64 {
	unit := d.unitBytes(s.DType.Size(), p)
	var out []int64
	for _, b := range s.sizes() {
		b = b / unit * unit
		if b == 0 || (len(out) > 0 && out[len(out)-1] == b) {
			continue
		}
		out = append(out, b)
	}
	return out
}

// layout is the element counts of one rank's send and receive buffers for
// a size of total elements on p ranks (see comm.Call for the layouts).
func (d opDef) layout(total, p, rank, root int) (nSend, nRecv int) {
	switch d.kind {
	case comm.KindAllGather:
		return total / p, total
	case comm.KindReduceScatter:
		return total, total / p
	case comm.KindBroadcast:
		return 0, total // in place: the receive buffer is the buffer
	case comm.KindReduce:
		if rank != root {
			return total, 0
		}
	}
	return total, total
}

// buffers are one rank's memory for one op, allocated once for the largest
// size and sliced for each smaller one.
type buffers struct {
	send, recv []byte
	scratch    []byte // the full AllReduce result of a viaAllReduce op
}

func newBuffers(d opDef, maxTotal, es, p, rank, root int) buffers {
	ns, nr := d.layout(maxTotal, p, rank, root)
	b := buffers{send: make([]byte, ns*es), recv: make([]byte, nr*es)}
	if d.viaAllReduce {
		b.scratch = make([]byte, maxTotal*es)
	}
	return b
}

// call is one operation of a given size, ready to run repeatedly.
type call struct {
	def        opDef
	send, recv comm.Buffer
	op         comm.ReduceOp
	root       int
	rank       int
	scratch    comm.Buffer // viaAllReduce: the AllReduce's result
	inPlace    bool        // the in-place form (see hasInPlace)
	right      int         // sendrecv: the rank this one sends to
	left       int         // sendrecv: the rank this one receives from
}

// sendRecvTag is the tag of the sendrecv messages.
const sendRecvTag = 0x62656e //  "ben"

// hasInPlace reports whether the op has an in-place form distinct from
// its out-of-place one (NCCL's definitions): AllReduce, Reduce, AllGather
// and ReduceScatter (and reducescatter_ar, by an in-place AllReduce).
// Broadcast has one buffer, so it is always in place; AllToAll and
// sendrecv have no in-place form.
func (d opDef) hasInPlace() bool {
	switch d.kind {
	case comm.KindAllReduce, comm.KindReduce, comm.KindAllGather, comm.KindReduceScatter:
		return true
	}
	return false
}

// newCall slices one rank's buffers for a size of total elements, in the
// op's out-of-place or (inPlace, where hasInPlace) in-place form.
func newCall(d opDef, bufs buffers, dt comm.DType, op comm.ReduceOp, total, p, rank, root int, inPlace bool) (call, error) {
	es := dt.Size()
	ns, nr := d.layout(total, p, rank, root)
	send, err := comm.HostBytes(dt, bufs.send[:ns*es])
	if err != nil {
		return call{}, err
	}
	recv, err := comm.HostBytes(dt, bufs.recv[:nr*es])
	if err != nil {
		return call{}, err
	}
	c := call{def: d, send: send, recv: recv, op: op, root: root, rank: rank, right: (rank + 1) % p, left: (rank + p - 1) % p}
	if d.viaAllReduce {
		if c.scratch, err = comm.HostBytes(dt, bufs.scratch[:total*es]); err != nil {
			return call{}, err
		}
	}
	if d.kind == comm.KindBroadcast {
		c.send = c.recv
	}
	if d.kind == comm.KindReduce && rank != root {
		c.recv = comm.Buffer{}
	}
	if !inPlace || !d.hasInPlace() {
		return c, nil
	}
	c.inPlace = true
	switch d.kind {
	case comm.KindAllReduce:
		c.send = c.recv
	case comm.KindReduce:
		if rank == root {
			c.send = c.recv
		}
	case comm.KindAllGather:
		c.send = c.recv.Slice(rank*ns, ns)
	case comm.KindReduceScatter:
		c.recv = c.send.Slice(rank*nr, nr)
		if d.viaAllReduce {
			c.scratch = c.send // the AllReduce in place; the block is then already there
		}
	}
	return c, nil
}

// reduce runs one reducing collective of kind with c's op: through its
// blocking form, or for PreMulSum, which none carries, through Start, with
// the factor 1 on every rank (so that the expected result is Sum's).
func (c call) reduce(ctx context.Context, cm comm.Communicator, kind comm.Kind, send, recv comm.Buffer) error {
	switch {
	case c.op == comm.PreMulSum:
		return cm.Start(ctx, comm.Call{Kind: kind, Send: send, Recv: recv, Op: c.op, Scalar: 1, Root: c.root}).Wait()
	case kind == comm.KindReduceScatter:
		return cm.ReduceScatter(ctx, send, recv, c.op)
	case kind == comm.KindReduce:
		return cm.Reduce(ctx, send, recv, c.op, c.root)
	}
	return cm.AllReduce(ctx, send, recv, c.op)
}

// run executes the operation once on this rank.
func (c call) run(ctx context.Context, cm comm.Communicator) error {
	switch c.def.kind {
	case comm.KindAllReduce:
		return c.reduce(ctx, cm, comm.KindAllReduce, c.send, c.recv)
	case comm.KindAllGather:
		return cm.AllGather(ctx, c.send, c.recv)
	case comm.KindReduceScatter:
		if c.def.viaAllReduce {
			if err := c.reduce(ctx, cm, comm.KindAllReduce, c.send, c.scratch); err != nil {
				return err
			}
			if !c.inPlace {
				n := c.recv.ByteLen()
				copy(c.recv.Bytes(), c.scratch.Bytes()[c.rank*n:])
			}
			return nil
		}
		return c.reduce(ctx, cm, comm.KindReduceScatter, c.send, c.recv)
	case comm.KindAllToAll:
		return cm.AllToAll(ctx, c.send, c.recv)
	case comm.KindBroadcast:
		return cm.Broadcast(ctx, c.recv, c.root)
	case comm.KindReduce:
		return c.reduce(ctx, cm, comm.KindReduce, c.send, c.recv)
	case comm.KindSend:
		// Both directions at once, as nccl-tests' sendrecv_perf: the time is
		// that of one message over one link while every link is busy.
		s := cm.Start(ctx, comm.Call{Kind: comm.KindSend, Send: c.send, Peer: c.right, Tag: sendRecvTag})
		r := cm.Start(ctx, comm.Call{Kind: comm.KindRecv, Recv: c.recv, Peer: c.left, Tag: sendRecvTag})
		errR := r.Wait()
		errS := s.Wait()
		if errS != nil {
			return errS
		}
		return errR
	}
	return fmt.Errorf("bench: %s has no runner", c.def.name)
}
