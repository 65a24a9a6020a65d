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
	return c.Start(ctx, Call{Kind: KindAllReduce, Send: send, Recv: recv, Op: op})
}

// StartBroadcast starts c.Broadcast(ctx, buf, root).
func StartBroadcast(ctx context.Context, c Starter, buf Buffer, root int) *Work {
	return c.Start(ctx, Call{Kind: KindBroadcast, Send: buf, Recv: buf, Root: root})
}

// StartReduce starts c.Reduce(ctx, send, recv, op, root).
func StartReduce(ctx context.Context, c Starter, send, recv Buffer, op ReduceOp, root int) *Work {
	return c.Start(ctx, Call{Kind: KindReduce, Send: send, Recv: recv, Op: op, Root: root})
}

// StartAllGather starts c.AllGather(ctx, send, recv).
func StartAllGather(ctx context.Context, c Starter, send, recv Buffer) *Work {
	return c.Start(ctx, Call{Kind: KindAllGather, Send: send, Recv: recv})
}

// StartReduceScatter starts c.ReduceScatter(ctx, send, recv, op).
func StartReduceScatter(ctx context.Context, c Starter, send, recv Buffer, op ReduceOp) *Work {
	return c.Start(ctx, Call{Kind: KindReduceScatter, Send: send, Recv: recv, Op: op})
}

// StartAllToAll starts c.AllToAll(ctx, send, recv).
func StartAllToAll(ctx context.Context, c Starter, send, recv Buffer) *Work {
	return c.Start(ctx, Call{Kind: KindAllToAll, Send: send, Recv: recv})
}

// StartAllToAllV starts c.AllToAllV(ctx, send, sendCounts, recv,
// recvCounts). The count slices, like the buffers, belong to the operation
// until it is done.
func StartAllToAllV(ctx context.Context, c Starter, send Buffer, sendCounts []int, recv Buffer, recvCounts []int) *Work {
	return c.Start(ctx, Call{Kind: KindAllToAllV, Send: send, Recv: recv, SendCounts: sendCounts, RecvCounts: recvCounts})
}

// StartGather starts c.Gather(ctx, send, recv, root).
func StartGather(ctx context.Context, c Starter, send, recv Buffer, root int) *Work {
	return c.Start(ctx, Call{Kind: KindGather, Send: send, Recv: recv, Root: root})
}

// StartScatter starts c.Scatter(ctx, send, recv, root).
func StartScatter(ctx context.Context, c Starter, send, recv Buffer, root int) *Work {
	return c.Start(ctx, Call{Kind: KindScatter, Send: send, Recv: recv, Root: root})
}

// StartScan starts c.Scan(ctx, send, recv, op).
func StartScan(ctx context.Context, c Starter, send, recv Buffer, op ReduceOp) *Work {
	return c.Start(ctx, Call{Kind: KindScan, Send: send, Recv: recv, Op: op})
}

// StartExScan starts c.ExScan(ctx, send, recv, op).
func StartExScan(ctx context.Context, c Starter, send, recv Buffer, op ReduceOp) *Work {
	return c.Start(ctx, Call{Kind: KindExScan, Send: send, Recv: recv, Op: op})
}

// StartSend starts c.Send(ctx, buf, peer, tag) (MPI's Isend). Send and
// Recv take no sequence number: they are matched by peer and tag, and a
// started Send may wait for its Recv.
func StartSend(ctx context.Context, c Starter, buf Buffer, peer, tag int) *Work {
	return c.Start(ctx, Call{Kind: KindSend, Send: buf, Peer: peer, Tag: tag})
}

// StartRecv starts c.Recv(ctx, buf, peer, tag) (MPI's Irecv): start the
// Recv and the Send of an exchange, then wait for both, and neither side
// waits for the other's order.
func StartRecv(ctx context.Context, c Starter, buf Buffer, peer, tag int) *Work {
	return c.Start(ctx, Call{Kind: KindRecv, Recv: buf, Peer: peer, Tag: tag})
}

// StartBarrier starts c.Barrier(ctx) (MPI's Ibarrier): its Work is done once
// every rank has started it.
func StartBarrier(ctx context.Context, c Starter) *Work {
	return c.Start(ctx, Call{Kind: KindBarrier})
}
