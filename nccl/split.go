package nccl

import (
	"context"
	"fmt"
	"math"

	"github.com/hiercomm/hiercomm/comm"
)

// Split implements comm.Communicator: the control is split first (which
// orders the members by key, then rank, and compares the call across
// ranks), then the NCCL communicator with ncclCommSplit, in its place
// among the collectives, keyed by each member's rank in the control's
// child so that both children number the members alike. The child has its
// own stream, on the same device.
func (c *Comm) Split(ctx context.Context, color, key int) (comm.Communicator, error) {
	if color > math.MaxInt32 {
		err := &comm.ArgError{Kind: comm.KindSplit, Arg: "color", Problem: fmt.Sprintf("%d does not fit NCCL's int (at most %d)", color, math.MaxInt32)}
		return nil, c.opError(comm.KindSplit, 0, -1, err)
	}
	if color < 0 && color != comm.NoColor {
		err := &comm.ArgError{Kind: comm.KindSplit, Arg: "color", Problem: fmt.Sprintf("%d is negative (use comm.NoColor to take no part)", color)}
		return nil, c.opError(comm.KindSplit, 0, -1, err)
	}
	t := &task{ctx: ctx, call: comm.Call{Kind: comm.KindSplit}}
	var child comm.Communicator
	var made *Comm
	var sub comm.Communicator
	t.admit = func() error {
		// The control's split, in its place among the control's
		// collectives.
		var err error
		if sub, err = c.control.Split(ctx, color, key); err != nil {
			return c.opError(comm.KindSplit, t.seq, -1, err)
		}
		return nil
	}
	t.split = func() error {
		ncColor, ncKey := int32(ncclSplitNoColor), int32(0)
		if sub != nil {
			ncColor, ncKey = int32(color), int32(sub.Rank())
		}
		nc, err := initComm(ctx, c.th, c.lib, c, c.watcher.done, func(out *ncclComm, cfg *ncclConfig) ncclResult {
			return c.lib.nccl.CommSplit(c.nc, ncColor, ncKey, out, cfg)
		}, "ncclCommSplit")
		if err == nil && nc != 0 {
			// The child finishes its part of the job on this thread too
			// (in NCCL 2.23–2.26 the job lives in the issuing thread's
			// group state): poll it here before it gets a thread of its
			// own.
			err = poll(ctx, c.watcher.done, func() (bool, error) {
				var st ncclResult
				err := c.th.do(func() error {
					if r := c.lib.nccl.CommGetAsyncError(nc, &st); r != ncclSuccess {
						return c.lib.ncclError("ncclCommGetAsyncError", r, nc)
					}
					if st != ncclSuccess && st != ncclInProgress {
						return c.lib.ncclError("ncclCommSplit", st, nc)
					}
					return nil
				})
				return err == nil && st == ncclSuccess, err
			})
			if err != nil {
				_ = c.th.do(func() error { c.lib.nccl.CommAbort(nc); return nil })
				nc = 0
			}
		}
		if err == nil && (nc == 0) != (sub == nil) {
			err = fmt.Errorf("ncclCommSplit gave rank %d %s, but the control's split %s", c.rank,
				map[bool]string{true: "no communicator", false: "a communicator"}[nc == 0],
				map[bool]string{true: "none", false: "one"}[sub == nil])
		}
		if err != nil {
			if sub != nil {
				sub.Close()
			}
			err = c.opError(comm.KindSplit, t.seq, -1, err)
			c.abort(err) // NCCL's split state of this communicator is unknown now
			return err
		}
		if sub == nil {
			return nil
		}
		cfg := c.cfg
		cfg.Stream = 0
		cfg.Name = fmt.Sprintf("%s/split(color %d)", c.cfg.Name, color)
		th, err := c.dev.newThread()
		if err == nil {
			w := watchControl(sub)
			if made, err = start(c.dev, th, sub, w, nc, cfg, c.minComputeCap); err != nil {
				sub.Close()
				<-w.done
				th.stop()
			}
		} else {
			sub.Close()
		}
		if err != nil {
			_ = c.th.do(func() error { c.lib.nccl.CommAbort(nc); return nil })
			return c.opError(comm.KindSplit, t.seq, -1, err)
		}
		child = made
		return nil
	}
	// The split's place among the collectives: every rank's record is
	// compared like a collective's.
	if err := c.exec.Do(ctx, t.call, nil, t); err != nil {
		return nil, err
	}
	return child, nil
}
