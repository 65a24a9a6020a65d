package nexar

import (
	"context"
	"fmt"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/internal/hoptrace"
)

// Point-to-point messages. A message is cut into pieces of at most
// SegmentBytes; every piece carries the message's number among those from
// the same sender with the same tag (Header.Seq), its piece number (Step),
// the tag (Sig.Root) and the message's dtype and element count (Sig), so
// messages with different tags may be received in any order while those
// with the same tag are received in the order they were sent (MPI's
// non-overtaking rule). Sends are eager: they return once the pieces are
// handed to the transport, without waiting for a matching Recv.

// startP2P starts a Send or Recv on a goroutine of its own.
func (c *Comm) startP2P(ctx context.Context, call comm.Call) *comm.Work {
	num, err := c.admitP2P(call)
	if err != nil {
		return comm.Failed(err)
	}
	w := comm.NewWork()
	go func() { w.Complete(c.runP2P(ctx, call, num)) }()
	return w
}

// doP2P is the blocking Send or Recv, on the calling goroutine: no
// goroutine and no Work between the caller and the transport.
func (c *Comm) doP2P(ctx context.Context, call comm.Call) error {
	num, err := c.admitP2P(call)
	if err != nil {
		return err
	}
	return c.runP2P(ctx, call, num)
}

// admitP2P checks a point-to-point call and gives it its message number
// among those with the same peer and tag.
func (c *Comm) admitP2P(call comm.Call) (uint64, error) {
	fail := func(err error) (uint64, error) {
		return 0, &comm.OpError{Rank: c.rank, Peer: call.Peer, Kind: call.Kind, Comm: c.name, Err: err}
	}
	if err := comm.ValidateHost(call, c.rank, c.Size()); err != nil {
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
		return &comm.OpError{Rank: c.rank, Peer: call.Peer, Kind: call.Kind, Comm: c.name, Err: localFailure(err)}
	}
	return nil
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
	sig := comm.Signature{Kind: comm.KindSend, DType: call.Send.DType(), Root: int32(call.Tag), Count: int64(call.Send.Len())}
	for i := range pieces(len(b), seg) {
		piece := b[i*seg : min(len(b), (i+1)*seg)]
		h := Header{Kind: FrameP2P, Comm: c.id, Seq: num, Step: uint32(i), Sig: sig}
		if call.Peer == c.rank {
			cp := getBuf(len(piece))
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

func (c *Comm) recvMessage(ctx context.Context, call comm.Call, num uint64, deadline time.Time) error {
	b := call.Recv.Bytes()
	seg := c.p2pSeg(call.Recv.DType())
	n := pieces(len(b), seg)
	for i := range n {
		f, err := c.await(ctx, mkey{kind: FrameP2P, seq: num, step: uint32(i), src: int32(call.Peer), tag: int32(call.Tag)}, call.Peer, nil, deadline)
		if err != nil {
			return err
		}
		if f.h.Sig.DType != call.Recv.DType() || f.h.Sig.Count != int64(call.Recv.Len()) {
			putBuf(f.payload)
			// Drop the rest of the message so it cannot be taken for a later one.
			c.discardMessage(num, call, pieces(int(f.h.Sig.Count)*f.h.Sig.DType.Size(), c.p2pSeg(f.h.Sig.DType)))
			return fmt.Errorf("%w: rank %d sent %d×%v with tag %d, but this Recv expects %d×%v",
				comm.ErrMismatch, call.Peer, f.h.Sig.Count, f.h.Sig.DType, call.Tag, call.Recv.Len(), call.Recv.DType())
		}
		copy(b[i*seg:], f.payload)
		putBuf(f.payload)
		hoptrace.Mark(hoptrace.Done, c.w.rank, c.members[call.Peer], num, uint32(i))
	}
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
			f, err := c.await(context.Background(), mkey{kind: FrameP2P, seq: num, step: uint32(i), src: int32(call.Peer), tag: int32(call.Tag)}, call.Peer, nil, deadline)
			if err != nil {
				return
			}
			putBuf(f.payload)
		}
	}()
}
