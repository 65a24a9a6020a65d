package nccl

import (
	"context"
	"fmt"
	"math"

	"github.com/hiercomm/hiercomm/comm"
)

// startP2P sends or receives over the control, through page-locked host
// memory. NCCL's ncclSend/ncclRecv match messages by order only, while
// comm's Send and Recv match by (peer, tag) and may be received in any
// order across tags; the control matches them that way. Tag t travels as
// the control's tag t+1 (its tag 0 is watch's).
func (c *Comm) startP2P(ctx context.Context, call comm.Call) *comm.Work {
	err := c.check(ctx, call)
	if err == nil && call.Tag == math.MaxInt {
		err = &comm.ArgError{Kind: call.Kind, Arg: "tag", Problem: fmt.Sprintf("%d is the one tag this communicator reserves", call.Tag)}
	}
	if err != nil {
		return comm.Failed(c.opError(call.Kind, 0, call.Peer, err))
	}
	switch closed, aborted := c.state(); {
	case closed:
		return comm.Failed(c.opError(call.Kind, 0, call.Peer, comm.ErrClosed))
	case aborted != nil:
		return comm.Failed(c.opError(call.Kind, 0, call.Peer, &comm.AbortedError{Cause: aborted}))
	}
	buf := call.Send
	if call.Kind == comm.KindRecv {
		buf = call.Recv
	}
	pin, err := c.dev.allocHost(buf.ByteLen())
	if err != nil {
		return comm.Failed(c.opError(call.Kind, 0, call.Peer, err))
	}
	host, _ := comm.HostBytes(buf.DType(), pin.bytes)
	hc := call
	hc.Tag++
	if call.Kind == comm.KindSend {
		if err := c.readForSend(pin, buf); err != nil {
			c.dev.freeHost(pin)
			return comm.Failed(c.opError(call.Kind, 0, call.Peer, err))
		}
		hc.Send = host
	} else {
		hc.Recv = host
	}
	sub := c.control.Start(ctx, hc)
	w := comm.NewWork()
	go func() {
		defer c.dev.freeHost(pin)
		err := sub.Wait()
		if err == nil && call.Kind == comm.KindRecv {
			err = c.dev.toDevice(buf, pin)
		}
		if err != nil {
			err = c.opError(call.Kind, 0, call.Peer, fmt.Errorf("over the control communicator: %w", err))
		}
		w.Complete(err)
	}()
	return w
}

// readForSend copies a Send's device buffer to page-locked memory. On the
// caller's stream (Config.Stream), the copy first waits for the work the
// caller queued there before the Send, so that the message is what the
// caller's kernels wrote.
func (c *Comm) readForSend(pin pinnedBuf, buf comm.Buffer) error {
	if c.cfg.Stream == 0 || buf.ByteLen() == 0 {
		return c.dev.toHost(pin, buf)
	}
	var ev cuEvent
	if err := c.th.do(func() error { return c.newEvent(&ev) }); err != nil {
		return err
	}
	err := c.dev.toHostAfter(pin, buf, ev)
	c.th.do(func() error { c.recycle(ev, err == nil); return nil })
	return err
}
