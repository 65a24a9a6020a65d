package nccl

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// launch queues t's NCCL operations on the stream, then an event, on the
// device thread. Collectives of no elements queue nothing (every rank
// agreed on the count). It sets t.ev, t.post and t.scratch.
func (c *Comm) launch(t *task) error {
	ops, err := c.operations(t)
	if err != nil {
		return err
	}
	return c.record(t, ops)
}

// operations are the NCCL calls of t, none for no elements; it sets
// t.post and t.scratch.
func (c *Comm) operations(t *task) ([]ncclOp, error) {
	call := t.call
	dt := call.Send.DType()
	if !dt.Valid() {
		dt = call.Recv.DType()
	}
	nt, _ := c.nativeType(dt)
	op, native := c.nativeOp(dt, call.Op)
	n := uintptr(call.Send.Len())
	if call.Kind == comm.KindReduceScatter || call.Kind == comm.KindScatter {
		n = uintptr(call.Recv.Len())
	}
	if call.Kind == comm.KindAllToAll {
		n = uintptr(call.Send.Len() / c.size)
	}
	switch {
	case !call.Kind.Reduces() || call.Op != comm.Avg || !native:
	case c.size == 1:
		// The mean of one rank's data is that data, and NCCL's Sum on one
		// rank is a plain copy. NCCL's Avg there runs a kernel of its own
		// that, before 2.29.7, can leave the last elements unwritten
		// (NVIDIA/nccl issue 1950; seen on a GPU with NCCL 2.28.3, and
		// reproduced by the fake, ncclfake.OneRankAvgCovers).
		op = ncclSum
	case bits.OnesCount(uint(c.size)) != 1:
		// NCCL's Avg on floats multiplies each input by 1/size before
		// summing (PreMulSum), which rounds differently from the sum
		// divided once; for a power-of-two size both are exact scalings
		// (unless x/size underflows to a subnormal).
		// Otherwise: Sum on the GPU, one division on the host.
		op = ncclSum
		if out := tier.ResultAt(call, c.rank); !out.IsZero() {
			t.post = func() error {
				return c.dev.hostOp([]comm.Buffer{out}, []bool{true}, []bool{true}, func(h [][]byte) error {
					tier.FinishAvg(out.DType(), h[0], c.size)
					return nil
				})
			}
		}
	}
	var ops []ncclOp
	nccl := c.lib.nccl
	s, r := call.Send.Ptr(), call.Recv.Ptr()
	es := uintptr(dt.Size())
	if call.Kind.Reduces() && !native && call.Kind != comm.KindScan && call.Kind != comm.KindExScan {
		// NCCL has no op that computes this as comm defines it (types.go;
		// e.g. NCCL's float Min and Max are fminf/fmaxf, reduce_kernel.h
		// FuncMinMax: a NaN loses to any number, where comm's contract, and
		// every other tier, propagates it). Gather every rank's part on the
		// GPU and combine on the host instead.
		if n == 0 {
			return nil, nil
		}
		all, err := c.allocScratch(dt, c.size*int(n))
		if err != nil {
			return nil, err
		}
		t.scratch = append(t.scratch, all)
		a := all.Ptr()
		if call.Kind == comm.KindReduceScatter {
			ops = c.exchange(nt, func(j int) (uintptr, uintptr, uintptr, uintptr) {
				return s + uintptr(j)*n*es, n, a + uintptr(j)*n*es, n
			})
		} else {
			ops = one("ncclAllGather (combined on the host)", n, func() ncclResult { return nccl.AllGather(s, a, n, nt, c.nc, c.stream) })
		}
		scalars, more, err := c.gatherScalars(t)
		if err != nil {
			return nil, err
		}
		ops = append(ops, more...)
		if out := tier.ResultAt(call, c.rank); !out.IsZero() {
			t.post = c.combine(all, c.size, int(n), call.Op, scalars, out)
		}
		return ops, nil
	}
	var premul []ncclOp // around the collective: its op, made and destroyed
	if call.Kind.Reduces() && call.Op == comm.PreMulSum {
		premul = c.preMulOp(dt, nt, call.Scalar, &op)
	}
	switch call.Kind {
	case comm.KindAllReduce:
		ops = one("ncclAllReduce", n, func() ncclResult { return nccl.AllReduce(s, r, n, nt, op, c.nc, c.stream) })
	case comm.KindBroadcast:
		ops = one("ncclBroadcast", n, func() ncclResult { return nccl.Broadcast(s, s, n, nt, int32(call.Root), c.nc, c.stream) })
	case comm.KindReduce:
		if c.rank != call.Root {
			r = s // not written on a non-root
		}
		ops = one("ncclReduce", n, func() ncclResult { return nccl.Reduce(s, r, n, nt, op, int32(call.Root), c.nc, c.stream) })
	case comm.KindAllGather:
		ops = one("ncclAllGather", n, func() ncclResult { return nccl.AllGather(s, r, n, nt, c.nc, c.stream) })
	case comm.KindReduceScatter:
		ops = one("ncclReduceScatter", n, func() ncclResult { return nccl.ReduceScatter(s, r, n, nt, op, c.nc, c.stream) })
	case comm.KindBarrier:
		f := c.flag.Ptr()
		ops = one("ncclAllReduce (barrier)", 1, func() ncclResult { return nccl.AllReduce(f, f, 1, ncclUint8, ncclMax, c.nc, c.stream) })
	case comm.KindAllToAll:
		ops = c.exchange(nt, func(j int) (uintptr, uintptr, uintptr, uintptr) {
			return s + uintptr(j)*n*es, n, r + uintptr(j)*n*es, n
		})
	case comm.KindAllToAllV:
		so, ro := tier.Offsets(call.SendCounts, dt.Size()), tier.Offsets(call.RecvCounts, dt.Size())
		ops = c.exchange(nt, func(j int) (uintptr, uintptr, uintptr, uintptr) {
			return s + uintptr(so[j]), uintptr(call.SendCounts[j]), r + uintptr(ro[j]), uintptr(call.RecvCounts[j])
		})
	case comm.KindGather:
		root := call.Root
		ops = c.exchange(nt, func(j int) (uintptr, uintptr, uintptr, uintptr) {
			var sn, rn uintptr
			if j == root {
				sn = n
			}
			if c.rank == root {
				rn = n
			}
			return s, sn, r + uintptr(j)*n*es, rn
		})
	case comm.KindScatter:
		root := call.Root
		ops = c.exchange(nt, func(j int) (uintptr, uintptr, uintptr, uintptr) {
			var sn, rn uintptr
			if c.rank == root {
				sn = n
			}
			if j == root {
				rn = n
			}
			return s + uintptr(j)*n*es, sn, r, rn
		})
	case comm.KindScan, comm.KindExScan:
		if n == 0 {
			break
		}
		all, err := c.allocScratch(dt, c.size*int(n))
		if err != nil {
			return nil, err
		}
		t.scratch = append(t.scratch, all)
		a := all.Ptr()
		ops = one("ncclAllGather (scan)", n, func() ncclResult { return nccl.AllGather(s, a, n, nt, c.nc, c.stream) })
		scalars, more, err := c.gatherScalars(t)
		if err != nil {
			return nil, err
		}
		ops = append(ops, more...)
		premul = nil   // combined on the host
		upto := c.rank // ExScan: the ranks before this one
		if call.Kind == comm.KindScan {
			upto++
		}
		t.post = c.combine(all, upto, int(n), call.Op, scalars, call.Recv)
	default:
		return nil, fmt.Errorf("nccl: %v is not a collective this communicator runs", call.Kind)
	}
	if len(ops) > 0 && premul != nil {
		ops = append([]ncclOp{premul[0]}, append(ops, premul[1])...)
	}
	return ops, nil
}

// preMulOp is the pair of NCCL calls around a PreMulSum collective: the
// first makes *op, an op of this rank's scalar (rounded to dt, as NCCL
// reads it), the second destroys it once the collective is queued, or
// failed to be (queue runs it after a failure too): NCCL lets an op go as
// soon as the last call given it returned.
func (c *Comm) preMulOp(dt comm.DType, nt ncclDataType, scalar float64, op *ncclRedOp) []ncclOp {
	nccl := c.lib.nccl
	b := scalarBytes(dt, scalar)
	created := false
	return []ncclOp{
		{"ncclRedOpCreatePreMulSum", func() ncclResult {
			r := nccl.RedOpCreatePreMulSum(op, &b[0], nt, ncclScalarHostImmediate, c.nc)
			created = r == ncclSuccess
			return r
		}},
		{"ncclRedOpDestroy", func() ncclResult {
			if !created {
				return ncclSuccess
			}
			return nccl.RedOpDestroy(*op, c.nc)
		}},
	}
}

// gatherScalars is, for a PreMulSum call combined on the host, a device
// buffer that the returned NCCL calls fill with every rank's scalar (as
// float64, in rank order), so that the host can scale each rank's part
// as that rank asked; a zero Buffer and no calls for any other op.
func (c *Comm) gatherScalars(t *task) (comm.Buffer, []ncclOp, error) {
	if t.call.Op != comm.PreMulSum {
		return comm.Buffer{}, nil, nil
	}
	all, err := c.allocScratch(comm.F64, c.size)
	if err != nil {
		return comm.Buffer{}, nil, err
	}
	t.scratch = append(t.scratch, all)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], math.Float64bits(t.call.Scalar))
	if err := c.dev.Write(all.Slice(c.rank, 1), b[:]); err != nil {
		return comm.Buffer{}, nil, err
	}
	nccl, p := c.lib.nccl, all.Ptr()
	return all, one("ncclAllGather (premulsum scalars)", 1, func() ncclResult {
		return nccl.AllGather(p+uintptr(8*c.rank), p, 1, ncclFloat64, c.nc, c.stream)
	}), nil
}

// record queues ops and an event after them on the device thread (nothing
// for no ops).
func (c *Comm) record(t *task, ops []ncclOp) error {
	if len(ops) == 0 {
		return nil
	}
	return c.live(func() error {
		if err := c.queue(t.ctx, ops); err != nil {
			return err
		}
		return c.newEvent(&t.ev)
	})
}

// one is the single NCCL call of a collective, or none for no elements.
func one(name string, n uintptr, f func() ncclResult) []ncclOp {
	if n == 0 {
		return nil
	}
	return []ncclOp{{name, f}}
}

// ncclOp is one NCCL call of a collective, named for errors.
type ncclOp struct {
	name string
	call func() ncclResult
}

// exchange is a personalized exchange as one NCCL group of point-to-point
// calls: at(j) gives what goes to rank j (pointer, count) and what comes
// from it. Zero counts are left out on both sides alike (the control's
// comparison made sure the two sides agree).
func (c *Comm) exchange(nt ncclDataType, at func(j int) (sp, sn, rp, rn uintptr)) []ncclOp {
	nccl := c.lib.nccl
	var ops []ncclOp
	for j := range c.size {
		sp, sn, rp, rn := at(j)
		peer := int32(j)
		if sn > 0 {
			ops = append(ops, ncclOp{"ncclSend", func() ncclResult { return nccl.Send(sp, sn, nt, peer, c.nc, c.stream) }})
		}
		if rn > 0 {
			ops = append(ops, ncclOp{"ncclRecv", func() ncclResult { return nccl.Recv(rp, rn, nt, peer, c.nc, c.stream) }})
		}
	}
	if len(ops) == 0 {
		return nil
	}
	group := append([]ncclOp{{"ncclGroupStart", nccl.GroupStart}}, ops...)
	return append(group, ncclOp{"ncclGroupEnd", nccl.GroupEnd})
}

// queue makes the NCCL calls of ops on the communicator's thread. A
// group is always closed once opened, even after a failed call inside it,
// and so is every group around it (a batch's group holds AllToAll's):
// NCCL's group depth is per thread, and a group left open would make every
// later call on this thread return success without running. A
// non-blocking communicator may answer ncclInProgress (a call still being
// enqueued, e.g. while NCCL connects peers for the first time): the next
// call waits until NCCL's asynchronous state says it is done.
func (c *Comm) queue(ctx context.Context, ops []ncclOp) error {
	var first error
	open := 0 // groups opened and not yet closed
	for _, op := range ops {
		if first != nil && !(open > 0 && op.name == "ncclGroupEnd") && op.name != "ncclRedOpDestroy" {
			continue // after a failure, only close the groups (and release a PreMulSum op)
		}
		r := op.call()
		switch {
		case op.name == "ncclGroupStart" && r == ncclSuccess:
			open++
		case op.name == "ncclGroupEnd" && open > 0:
			open--
		}
		if r == ncclInProgress {
			r = c.settle(ctx)
		}
		if r != ncclSuccess && first == nil {
			first = c.lib.ncclError(op.name, r, c.nc)
		}
	}
	return first
}

// settle polls NCCL's asynchronous state until it is no longer
// ncclInProgress, ctx ends (ncclTimeout) or the communicator is aborted
// (ncclRemoteError). It runs on the communicator's thread, which it holds:
// it spins first, then sleeps a little between polls.
func (c *Comm) settle(ctx context.Context) ncclResult {
	for i := 0; ; i++ {
		var state ncclResult
		if r := c.lib.nccl.CommGetAsyncError(c.nc, &state); r != ncclSuccess {
			return r
		}
		if state != ncclInProgress {
			return state
		}
		if _, aborted := c.state(); aborted != nil {
			return ncclRemoteError
		}
		if ctx.Err() != nil {
			return ncclTimeout
		}
		if i > 1000 {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// combine is the host step of Scan, ExScan and the reductions NCCL has no
// op for (types.go): the first k blocks of n elements of all (every rank's
// input, in rank order) are combined with op in rank order, exactly as a
// sequential reduction, into dst; no blocks (ExScan on rank 0) give the
// op's identity. For PreMulSum, scalars holds every rank's scalar
// (gatherScalars), by which its block is first multiplied (tier.PreMul);
// for Avg the result is divided by the communicator's size.
func (c *Comm) combine(all comm.Buffer, k, n int, op comm.ReduceOp, scalars, dst comm.Buffer) func() error {
	dt := all.DType()
	es := dt.Size()
	return func() error {
		if k == 0 {
			return c.dev.hostOp([]comm.Buffer{dst}, []bool{false}, []bool{true}, func(h [][]byte) error {
				tier.FillIdentity(dt, op, h[0])
				return nil
			})
		}
		kern, err := tier.NewKernel(dt, op)
		if err != nil {
			return err
		}
		bufs, in, out := []comm.Buffer{all.Slice(0, k*n), dst}, []bool{true, false}, []bool{false, true}
		if op == comm.PreMulSum {
			bufs, in, out = append(bufs, scalars), append(in, true), append(out, false)
		}
		return c.dev.hostOp(bufs, in, out, func(h [][]byte) error {
			block := func(j int) []byte {
				b := h[0][j*n*es : (j+1)*n*es]
				if op == comm.PreMulSum { // the pinned copy: scaling it leaves the device's alone
					tier.PreMul(dt, b, b, math.Float64frombits(binary.LittleEndian.Uint64(h[2][8*j:])))
				}
				return b
			}
			acc := h[1]
			copy(acc, block(0))
			for j := 1; j < k; j++ {
				kern.Reduce(acc, block(j))
			}
			kern.Finish(acc, c.size)
			return nil
		})
	}
}
