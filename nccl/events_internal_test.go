package nccl

import (
	"context"
	"sync"

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

// HoldEvents makes lib's driver report the events recorded on the streams
// of held communicators as not complete, whatever the device did: a
// test's way to keep a communicator's completer from seeing its
// operations end (hold(c, true)) and to let it see them again (hold(c,
// false)). Call it before any communicator is made on lib.
func HoldEvents(lib *Library) (hold func(c *Comm, on bool)) {
	h := &heldDriver{driverAPI: lib.drv, held: map[cuStream]bool{}, on: map[cuEvent]cuStream{}}
	lib.drv = h
	return func(c *Comm, on bool) {
		h.mu.Lock()
		h.held[c.stream] = on
		h.mu.Unlock()
	}
}

// heldDriver is a driver table whose EventQuery HoldEvents holds.
type heldDriver struct {
	driverAPI
	mu   sync.Mutex
	held map[cuStream]bool    // streams whose events are held
	on   map[cuEvent]cuStream // the stream each event was last recorded on
}

func (h *heldDriver) EventRecord(e cuEvent, s cuStream) cuResult {
	h.mu.Lock()
	h.on[e] = s
	h.mu.Unlock()
	return h.driverAPI.EventRecord(e, s)
}

func (h *heldDriver) EventQuery(e cuEvent) cuResult {
	h.mu.Lock()
	s, ok := h.on[e]
	held := ok && h.held[s]
	h.mu.Unlock()
	if held {
		return cudaErrorNotReady
	}
	return h.driverAPI.EventQuery(e)
}

// Staging is how many page-locked buffers d keeps for its own copies
// (Write's staging of Go memory, the stagers'), for the external tests.
func Staging(d *Device) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pinned)
}
