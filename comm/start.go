package comm

import "context"

// The non-blocking forms, one per operation: torch.distributed's
// async_op=True and MPI's Iallreduce, as one call. Each is c.Start with
// the Call its blocking method makes, so
//
//	w := comm.StartAllReduce(ctx, c, comm.Host(grads), comm.Host(grads), comm.Sum)
//	// … compute …
//	err := w.Wait()
//
// is c.AllReduce(ctx, …) split in two. What Start promises holds for every
// one of them:
//
//   - The order of collectives on c is fixed when they are started, not when
//     they are waited for: every rank must start the same collectives in the
//     same order, and may wait for them in any order.
//   - The buffers belong to the operation until its Work is done: do not
//     read a recv buffer or write a send buffer before Wait returns (or Done
//     is closed, or Test says done).
//   - ctx bounds the whole operation, not just the call: cancelling it after
//     the Start form returned ends the operation (on every rank) with an
//     error.
//   - A bad argument does not panic or return early: the Work fails with an
//     *ArgError, and the other ranks are told, as with the blocking form.
//
// Every returned Work must be waited for (or watched through Done) before
// the buffers are reused; none needs to be released.

// StartAllReduce starts c.AllReduce(ctx, send, recv, op).
func StartAllReduce(ctx context.Context, c Starter, send, recv Buffer, op ReduceOp) *Work {
	return c.Start(ctx, allReduceCall(send, recv, op))
}

// StartBroadcast starts c.Broadcast(ctx, buf, root).
func StartBroadcast(ctx context.Context, c Starter, buf Buffer, root int) *Work {
	return c.Start(ctx, broadcastCall(buf, root))
}

// StartReduce starts c.Reduce(ctx, send, recv, op, root).
func StartReduce(ctx context.Context, c Starter, send, recv Buffer, op ReduceOp, root int) *Work {
	return c.Start(ctx, reduceCall(send, recv, op, root))
}

// StartAllGather starts c.AllGather(ctx, send, recv).
func StartAllGather(ctx context.Context, c Starter, send, recv Buffer) *Work {
	return c.Start(ctx, allGatherCall(send, recv))
}

// StartReduceScatter starts c.ReduceScatter(ctx, send, recv, op).
func StartReduceScatter(ctx context.Context, c Starter, send, recv Buffer, op ReduceOp) *Work {
	return c.Start(ctx, reduceScatterCall(send, recv, op))
}

// StartAllToAll starts c.AllToAll(ctx, send, recv).
func StartAllToAll(ctx context.Context, c Starter, send, recv Buffer) *Work {
	return c.Start(ctx, allToAllCall(send, recv))
}

// StartAllToAllV starts c.AllToAllV(ctx, send, sendCounts, recv,
// recvCounts). The count slices, like the buffers, belong to the operation
// until it is done.
func StartAllToAllV(ctx context.Context, c Starter, send Buffer, sendCounts []int, recv Buffer, recvCounts []int) *Work {
	return c.Start(ctx, allToAllVCall(send, sendCounts, recv, recvCounts))
}

// StartGather starts c.Gather(ctx, send, recv, root).
func StartGather(ctx context.Context, c Starter, send, recv Buffer, root int) *Work {
	return c.Start(ctx, gatherCall(send, recv, root))
}

// StartScatter starts c.Scatter(ctx, send, recv, root).
func StartScatter(ctx context.Context, c Starter, send, recv Buffer, root int) *Work {
	return c.Start(ctx, scatterCall(send, recv, root))
}

// StartScan starts c.Scan(ctx, send, recv, op).
func StartScan(ctx context.Context, c Starter, send, recv Buffer, op ReduceOp) *Work {
	return c.Start(ctx, scanCall(send, recv, op))
}

// StartExScan starts c.ExScan(ctx, send, recv, op).
func StartExScan(ctx context.Context, c Starter, send, recv Buffer, op ReduceOp) *Work {
	return c.Start(ctx, exScanCall(send, recv, op))
}

// StartSend starts c.Send(ctx, buf, peer, tag) (MPI's Isend). Send and
// Recv take no sequence number: they are matched by peer and tag, and a
// started Send may wait for its Recv.
func StartSend(ctx context.Context, c Starter, buf Buffer, peer, tag int) *Work {
	return c.Start(ctx, sendCall(buf, peer, tag))
}

// StartRecv starts c.Recv(ctx, buf, peer, tag) (MPI's Irecv): start the
// Recv and the Send of an exchange, then wait for both, and neither side
// waits for the other's order.
func StartRecv(ctx context.Context, c Starter, buf Buffer, peer, tag int) *Work {
	return c.Start(ctx, recvCall(buf, peer, tag))
}

// StartBarrier starts c.Barrier(ctx) (MPI's Ibarrier): its Work is done once
// every rank has started it.
func StartBarrier(ctx context.Context, c Starter) *Work {
	return c.Start(ctx, barrierCall())
}

// The Call of each operation, for its blocking method (Blocking) and its
// Start form.

func allReduceCall(send, recv Buffer, op ReduceOp) Call {
	return Call{Kind: KindAllReduce, Send: send, Recv: recv, Op: op}
}

func broadcastCall(buf Buffer, root int) Call {
	return Call{Kind: KindBroadcast, Send: buf, Recv: buf, Root: root}
}

func reduceCall(send, recv Buffer, op ReduceOp, root int) Call {
	return Call{Kind: KindReduce, Send: send, Recv: recv, Op: op, Root: root}
}

func allGatherCall(send, recv Buffer) Call { return Call{Kind: KindAllGather, Send: send, Recv: recv} }

func reduceScatterCall(send, recv Buffer, op ReduceOp) Call {
	return Call{Kind: KindReduceScatter, Send: send, Recv: recv, Op: op}
}

func allToAllCall(send, recv Buffer) Call { return Call{Kind: KindAllToAll, Send: send, Recv: recv} }

func allToAllVCall(send Buffer, sendCounts []int, recv Buffer, recvCounts []int) Call {
	return Call{Kind: KindAllToAllV, Send: send, Recv: recv, SendCounts: sendCounts, RecvCounts: recvCounts}
}

func gatherCall(send, recv Buffer, root int) Call {
	return Call{Kind: KindGather, Send: send, Recv: recv, Root: root}
}

func scatterCall(send, recv Buffer, root int) Call {
	return Call{Kind: KindScatter, Send: send, Recv: recv, Root: root}
}

func scanCall(send, recv Buffer, op ReduceOp) Call {
	return Call{Kind: KindScan, Send: send, Recv: recv, Op: op}
}

func exScanCall(send, recv Buffer, op ReduceOp) Call {
	return Call{Kind: KindExScan, Send: send, Recv: recv, Op: op}
}

func sendCall(buf Buffer, peer, tag int) Call {
	return Call{Kind: KindSend, Send: buf, Peer: peer, Tag: tag}
}

func recvCall(buf Buffer, peer, tag int) Call {
	return Call{Kind: KindRecv, Recv: buf, Peer: peer, Tag: tag}
}

func barrierCall() Call { return Call{Kind: KindBarrier} }
