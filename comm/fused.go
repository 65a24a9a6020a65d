package comm

import (
	"context"
	"fmt"
	"unsafe"
)

// Fused (bucketed) AllReduce: a trainer with hundreds of small gradient
// tensors pays a collective's latency once per tensor; packing them into one
// buffer pays it once. This is what torch DDP's gradient buckets do, here as
// a function over any Communicator. It packs into a new buffer on every
// call; a trainer that reduces the same gradients every step keeps its
// buckets laid out once with dp.Reducer instead.

// AllReduceFused is StartAllReduceFused(ctx, c, bufs, op).Wait().
func AllReduceFused(ctx context.Context, c Communicator, bufs []Buffer, op ReduceOp) error {
	return StartAllReduceFused(ctx, c, bufs, op).Wait()
}

// StartAllReduceFused starts an AllReduce of every buffer of bufs with op, as
// one collective: it packs the buffers into one contiguous host buffer,
// starts one AllReduce on c in place over it, and when that is done copies
// each buffer's part of the result back. The buffers belong to the operation
// until the returned Work is done, as with Start; on an error they are left
// untouched (the reduction works on the packed copy).
//
// Every rank must pass the same number of elements of the same dtype in
// total, with the same op (the packed call's Signature is what ranks agree
// on); how the total is split into buffers is each rank's own business, but
// element i of the packing (bufs in order, each buffer's elements in order)
// is reduced with element i of every other rank. bufs must be host buffers of
// one dtype; any lengths, 0 included.
//
// Ranks stay aligned whatever happens. StartAllReduceFused always starts
// exactly one collective on c, so every rank consumes one sequence number:
//
//   - when the total is 0 elements, it still starts the (empty) AllReduce;
//   - when bufs is wrong on this rank (empty, a device or missing buffer,
//     mixed dtypes), it starts an AllReduce with no buffers, a call that c
//     rejects on this rank with its own *ArgError and reports to the other
//     ranks (as every implementation does for a bad argument), so their
//     fused AllReduce fails instead of waiting; once that call is done, the
//     returned Work fails with an *ArgError naming the bad argument
//     ("bufs[3]"), not with c's error about the empty call.
func StartAllReduceFused(ctx context.Context, c Communicator, bufs []Buffer, op ReduceOp) *Work {
	dt, total, err := fusedLayout(bufs)
	if err != nil {
		rejected := c.Start(ctx, Call{Kind: KindAllReduce, Send: Buffer{}, Recv: Buffer{}, Op: op})
		w := NewWork()
		go func() {
			<-rejected.Done()
			w.Complete(err)
		}()
		return w
	}
	return startPacked(ctx, c, dt, total, bufs, bufs, op)
}

// startPacked starts one AllReduce with op, in place, over a packed copy
// of sends (host buffers of dt, total elements in all) and, once it is
// done, copies each one's part of the result into recvs[i] (of the same
// length); on an error recvs are left untouched.
func startPacked(ctx context.Context, c Starter, dt DType, total int, sends, recvs []Buffer, op ReduceOp) *Work {
	packed := alignedBytes(total * dt.Size())
	off := 0
	for _, b := range sends {
		off += copy(packed[off:], b.Bytes())
	}
	pb, err := HostBytes(dt, packed)
	if err != nil {
		panic("comm: fused buffer: " + err.Error()) // whole elements by construction
	}
	inner := c.Start(ctx, Call{Kind: KindAllReduce, Send: pb, Recv: pb, Op: op})
	w := NewWork()
	go func() {
		if err := inner.Wait(); err != nil {
			w.Complete(err)
			return
		}
		off := 0
		for _, b := range recvs {
			off += copy(b.Bytes(), packed[off:])
		}
		w.Complete(nil)
	}()
	return w
}

// fusedLayout checks bufs and returns their dtype and total element count,
// or an *ArgError naming the first bad argument.
func fusedLayout(bufs []Buffer) (DType, int, error) {
	bad := func(arg, format string, a ...any) error {
		return &ArgError{Kind: KindAllReduce, Arg: arg, Problem: fmt.Sprintf(format, a...)}
	}
	if len(bufs) == 0 {
		return 0, 0, bad("bufs", "is empty; pass at least one buffer (zero-length ones are fine) so that the dtype is known")
	}
	dt, total := bufs[0].DType(), 0
	for i, b := range bufs {
		name := fmt.Sprintf("bufs[%d]", i)
		switch {
		case b.IsZero():
			return 0, 0, bad(name, "buffer is missing")
		case !b.OnHost():
			return 0, 0, bad(name, "is device memory (%v) but AllReduceFused packs buffers on the host; call AllReduce on device buffers", b)
		case b.DType() != dt:
			return 0, 0, bad(name, "dtype %v differs from bufs[0]'s %v; fuse buffers of one dtype at a time", b.DType(), dt)
		}
		total += b.Len()
	}
	return dt, total, nil
}

// alignedBytes returns n zero bytes aligned for every dtype (8 bytes), as the
// reduction kernels expect.
func alignedBytes(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	words := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
}
