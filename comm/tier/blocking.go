package tier

import (
	"context"
	"github.com/hiercomm/hiercomm/comm"
)

// Runner is a comm.Starter with a blocking form of Start that may run the
// operation on the caller's goroutine (Exec.Do): Blocking uses it when S
// has it.
type Runner interface {
	comm.Starter
	Run(ctx context.Context, c comm.Call) error
}

// Blocking implements the blocking methods of comm.Communicator as Start + Wait,
// or as S.Run when S is a Runner. An implementation embeds it, with S set
// to itself, and writes Start (and Run).
type Blocking struct{ S comm.Starter }

func (b Blocking) do(ctx context.Context, c comm.Call) error {
	if r, ok := b.S.(Runner); ok {
		return r.Run(ctx, c)
	}
	return b.S.Start(ctx, c).Wait()
}

func (b Blocking) AllReduce(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp) error {
	return b.do(ctx, comm.Call{Kind: comm.KindAllReduce, Send: send, Recv: recv, Op: op})
}

func (b Blocking) Broadcast(ctx context.Context, buf comm.Buffer, root int) error {
	return b.do(ctx, comm.Call{Kind: comm.KindBroadcast, Send: buf, Recv: buf, Root: root})
}

func (b Blocking) Reduce(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp, root int) error {
	return b.do(ctx, comm.Call{Kind: comm.KindReduce, Send: send, Recv: recv, Op: op, Root: root})
}

func (b Blocking) AllGather(ctx context.Context, send, recv comm.Buffer) error {
	return b.do(ctx, comm.Call{Kind: comm.KindAllGather, Send: send, Recv: recv})
}

func (b Blocking) ReduceScatter(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp) error {
	return b.do(ctx, comm.Call{Kind: comm.KindReduceScatter, Send: send, Recv: recv, Op: op})
}

func (b Blocking) AllToAll(ctx context.Context, send, recv comm.Buffer) error {
	return b.do(ctx, comm.Call{Kind: comm.KindAllToAll, Send: send, Recv: recv})
}

func (b Blocking) AllToAllV(ctx context.Context, send comm.Buffer, sendCounts []int, recv comm.Buffer, recvCounts []int) error {
	return b.do(ctx, comm.Call{Kind: comm.KindAllToAllV, Send: send, Recv: recv, SendCounts: sendCounts, RecvCounts: recvCounts})
}

func (b Blocking) Gather(ctx context.Context, send, recv comm.Buffer, root int) error {
	return b.do(ctx, comm.Call{Kind: comm.KindGather, Send: send, Recv: recv, Root: root})
}

func (b Blocking) Scatter(ctx context.Context, send, recv comm.Buffer, root int) error {
	return b.do(ctx, comm.Call{Kind: comm.KindScatter, Send: send, Recv: recv, Root: root})
}

func (b Blocking) Scan(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp) error {
	return b.do(ctx, comm.Call{Kind: comm.KindScan, Send: send, Recv: recv, Op: op})
}

func (b Blocking) ExScan(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp) error {
	return b.do(ctx, comm.Call{Kind: comm.KindExScan, Send: send, Recv: recv, Op: op})
}

func (b Blocking) Send(ctx context.Context, buf comm.Buffer, peer, tag int) error {
	return b.do(ctx, comm.Call{Kind: comm.KindSend, Send: buf, Peer: peer, Tag: tag})
}

func (b Blocking) Recv(ctx context.Context, buf comm.Buffer, peer, tag int) error {
	return b.do(ctx, comm.Call{Kind: comm.KindRecv, Recv: buf, Peer: peer, Tag: tag})
}

func (b Blocking) Barrier(ctx context.Context) error {
	return b.do(ctx, comm.Call{Kind: comm.KindBarrier})
}
