package nccl

import (
	"context"

	"github.com/hiercomm/hiercomm/comm"
)

// LibraryOf is the Library d belongs to, for the external tests that ask
// the fake about it (ncclfake.Events).
func LibraryOf(d *Device) *Library { return d.lib }

// WatchControl starts the watch of control that a Comm keeps (watchControl)
// for the external tests: done is closed when the watch ends, and err is
// then why.
func WatchControl(control comm.Communicator) (done <-chan struct{}, err func() error) {
	w := watchControl(control)
	return w.done, func() error { <-w.done; return w.err }
}

// RawAllReduce calls ncclAllReduce on c's NCCL communicator with NCCL's
// own op for op (ncclAvg for comm.Avg), without launch's rewrites, and
// waits for the stream; it returns the NCCL version it ran on. For the
// tests that hold the fake to the real NCCL.
func RawAllReduce(c *Comm, send, recv comm.Buffer, op comm.ReduceOp) (version int, err error) {
	nt, nop, n := ncclTypes[send.DType()], ncclOps[op], uintptr(send.Len())
	err = c.live(func() error {
		if err := c.queue(context.Background(), []ncclOp{{"ncclAllReduce", func() ncclResult {
			return c.lib.nccl.AllReduce(send.Ptr(), recv.Ptr(), n, nt, nop, c.nc, c.stream)
		}}}); err != nil {
			return err
		}
		if r := c.lib.drv.StreamSynchronize(c.stream); r != cudaSuccess {
			return c.lib.cuError("cuStreamSynchronize", r)
		}
		return nil
	})
	return c.lib.NCCLVersion(), err
}
