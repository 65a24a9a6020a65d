package nexar

import (
	"context"
	"fmt"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/internal/hoptrace"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// Point-to-point messages. A message is cut into pieces of at most
// SegmentBytes; every piece carries the message's number among those from
// the same sender with the same tag (Header.Seq), its piece number (Step),
// the tag (Sig.Root) and the message's dtype and element count (Sig), so
// messages with different tags may be received in any order while those
// with the same tag are received in the order they were sent (MPI's
// non-overtaking rule). Sends are eager: they return once the pieces are
// handed to the transport, without waiting for a matching Recv.

// startP2P starts a Send or Recv. A message of one frame needs no
// goroutine of its own: a Send is written on the caller's goroutine when
// its connection is free at once (sendNow), and a Recv is posted, so that
// the read loop that delivers its frame copies it into the buffer and
// completes the Work (postRecv). A longer message, or a Send whose
// connection is busy with another frame, runs on a goroutine.
func (c *Comm) startP2P(ctx context.Context, call comm.Call) *comm.Work {
	num, err := c.admitP2P(ctx, call)
	if err != nil {
		return comm.Failed(err)
	}
	if call.Kind == comm.KindRecv {
		if pieces(call.Recv.ByteLen(), c.p2pSeg(call.Recv.DType())) == 1 {
			return c.postRecv(ctx, call, num)
		}
	} else if sent, err := c.sendNow(ctx, call, num); sent {
		if err != nil {
			return comm.Failed(c.p2pError(call, err))
		}
		return comm.Succeeded()
	}
	return c.goP2P(ctx, call, num)
}

// goP2P runs message num of a Send or Recv on a goroutine of its own (a
// function of its own, so that only this path moves call to the heap).
func (c *Comm) goP2P(ctx context.Context, call comm.Call, num uint64) *comm.Work {
	w := comm.NewWork()
	go func() { w.Complete(c.runP2P(ctx, call, num)) }()
	return w
}

// sendNow sends message num of a Send of one frame without waiting: it
// reports false, having sent nothing, when the message is longer or the
// connection to the peer is busy.
func (c *Comm) sendNow(ctx context.Context, call comm.Call, num uint64) (bool, error) {
	b := call.Send.Bytes()
	if pieces(len(b), c.p2pSeg(call.Send.DType())) > 1 {
		return false, nil
	}
	if ctx.Err() != nil {
		return true, context.Cause(ctx)
	}
	if call.Peer == c.rank {
		return true, c.sendMessage(ctx, call, num) // a copy to itself never waits
	}
	sent, err := c.w.sendNow(c.members[call.Peer], c.p2pHeader(call, num, 0), b)
	if err != nil {
		return true, c.ownPeerError(err)
	}
	if sent && c.sent != nil {
		c.sent[call.Peer].Add(1)
	}
	return sent, nil
}

// doP2P is the blocking Send or Recv, on the calling goroutine: no
// goroutine and no Work between the caller and the transport.
func (c *Comm) doP2P(ctx context.Context, call comm.Call) error {
	num, err := c.admitP2P(ctx, call)
	if err != nil {
		return err
	}
	return c.runP2P(ctx, call, num)
}

// admitP2P checks a point-to-point call and gives it its message number
// among those with the same peer and tag.
func (c *Comm) admitP2P(ctx context.Context, call comm.Call) (uint64, error) {
	fail := func(err error) (uint64, error) {
		return 0, &comm.OpError{Rank: c.rank, Peer: call.Peer, Kind: call.Kind, Comm: c.name, Err: err}
	}
	if _, err := c.checks.Check(ctx, call, c.rank, c.Size()); err != nil {
		return fail(err)
	}
	k := p2pKey{peer: call.Peer, tag: call.Tag}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refuseLocked(); err != nil {
		return fail(err)
	}
	var num uint64
	if call.Kind == comm.KindSend {
		num = c.sendSeq[k]
		c.sendSeq[k]++
	} else {
		num = c.recvSeq[k]
		c.recvSeq[k]++
	}
	return num, nil
}

// runP2P moves message num of an admitted call. A Recv waits at most
// Timeout; a Send blocks only while the transport's window is full, which
// a peer that stops reading ends within FailureTimeout.
func (c *Comm) runP2P(ctx context.Context, call comm.Call, num uint64) error {
	var err error
	if call.Kind == comm.KindSend {
		err = c.sendMessage(ctx, call, num)
	} else {
		err = c.recvMessage(ctx, call, num, time.Now().Add(c.opt.Timeout))
	}
	if err != nil {
		return c.p2pError(call, err)
	}
	return nil
}

// p2pError is the error a Send or Recv returns when err ended it.
func (c *Comm) p2pError(call comm.Call, err error) error {
	return &comm.OpError{Rank: c.rank, Peer: call.Peer, Kind: call.Kind, Comm: c.name, Err: localFailure(err)}
}

// pieces is the number of frames a message of n bytes is cut into (at least one).
func pieces(n, seg int) int {
	if n == 0 {
		return 1
	}
	return (n + seg - 1) / seg
}

func (c *Comm) p2pSeg(dt comm.DType) int {
	return max(dt.Size(), c.opt.SegmentBytes/dt.Size()*dt.Size())
}

func (c *Comm) sendMessage(ctx context.Context, call comm.Call, num uint64) error {
	b := call.Send.Bytes()
	seg := c.p2pSeg(call.Send.DType())
	for i := range pieces(len(b), seg) {
		piece := b[i*seg : min(len(b), (i+1)*seg)]
		h := c.p2pHeader(call, num, i)
		if call.Peer == c.rank {
			cp := transport.GetBuf(len(piece))
			copy(cp, piece)
			h.Len = uint32(len(piece))
			c.deliver(c.w.rank, h, cp)
			continue
		}
		if err := c.sendFrame(ctx, call.Peer, h, piece); err != nil {
			return err
		}
	}
	return nil
}

// p2pHeader is the header of piece i of message num of a Send.
func (c *Comm) p2pHeader(call comm.Call, num uint64, i int) transport.Header {
	return transport.Header{Kind: transport.FrameP2P, Comm: c.id, Seq: num, Step: uint32(i), Sig: p2pSig(call.Send, call.Tag)}
}

// p2pSig is the Signature a message of b with tag carries.
func p2pSig(b comm.Buffer, tag int) comm.Signature {
	return comm.Signature{Kind: comm.KindSend, DType: b.DType(), Root: int32(tag), Count: int64(b.Len())}
}

// p2pFrameKey is the key of piece i of message num that call receives.
func p2pFrameKey(call comm.Call, num uint64, i int) mkey {
	return mkey{kind: transport.FrameP2P, seq: num, step: uint32(i), src: int32(call.Peer), tag: int32(call.Tag)}
}

// recvMessage receives message num of call; each piece may land in the
// caller's buffer straight from the socket (landing.go).
func (c *Comm) recvMessage(ctx context.Context, call comm.Call, num uint64, deadline time.Time) error {
	b, seg := call.Recv.Bytes(), c.p2pSeg(call.Recv.DType())
	sig := p2pSig(call.Recv, call.Tag)
	for i := range pieces(len(b), seg) {
		land := c.offer(b[i*seg:min(len(b), (i+1)*seg)], sig)
		f, err := c.await(ctx, p2pFrameKey(call, num, i), call.Peer, nil, deadline, land)
		if err != nil {
			return err
		}
		if err := c.takePiece(call, num, i, f); err != nil {
			return err
		}
	}
	return nil
}

// takePiece copies f, piece i of message num, into call's buffer, once it
// has checked that the message is what call expects (one that landed
// there is there already); f's payload goes back to the pool.
func (c *Comm) takePiece(call comm.Call, num uint64, i int, f frame) error {
	seg := c.p2pSeg(call.Recv.DType())
	dst := call.Recv.Bytes()[i*seg:]
	if sameMemory(f.payload, dst) {
		hoptrace.Mark(hoptrace.Done, c.w.rank, c.members[call.Peer], num, uint32(i))
		return nil
	}
	defer transport.PutBuf(f.payload)
	if f.h.Sig.DType != call.Recv.DType() || f.h.Sig.Count != int64(call.Recv.Len()) {
		// Drop the rest of the message so it cannot be taken for a later one.
		c.discardMessage(num, call, pieces(int(f.h.Sig.Count)*f.h.Sig.DType.Size(), c.p2pSeg(f.h.Sig.DType)))
		return fmt.Errorf("%w: rank %d sent %d×%v with tag %d, but this Recv expects %d×%v",
			comm.ErrMismatch, call.Peer, f.h.Sig.Count, f.h.Sig.DType, call.Tag, call.Recv.Len(), call.Recv.DType())
	}
	copy(dst, f.payload)
	hoptrace.Mark(hoptrace.Done, c.w.rank, c.members[call.Peer], num, uint32(i))
	return nil
}

// discardMessage drops pieces 1..n-1 of a message that was refused, when
// they arrive (bounded by the communicator's timeout).
func (c *Comm) discardMessage(num uint64, call comm.Call, n int) {
	if n <= 1 {
		return
	}
	go func() {
		deadline := time.Now().Add(c.opt.Timeout)
		for i := 1; i < n; i++ {
			f, err := c.await(context.Background(), p2pFrameKey(call, num, i), call.Peer, nil, deadline, nil)
			if err != nil {
				return
			}
			transport.PutBuf(f.payload)
		}
	}()
}
