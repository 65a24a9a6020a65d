package trainer

import (
	"context"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nccl"
)

// Host returns the communicator a trainer's host values travel on — the
// initial broadcast's verdicts, each step's losses, the test counts, the
// replicas' hashes — over c, the World: c itself on host memory (d nil),
// and otherwise c with every host buffer of a call staged through d's
// GPU memory. A GPU world takes device buffers only (torch's NCCL backend
// takes CUDA tensors only: a loss is moved to the GPU to be averaged
// there too). Device buffers pass through. The staging is not counted in
// d's Copies: those are the model's.
//
// A staged call allocates its device buffers, writes every host buffer
// into them (a receive buffer too, so that what the call leaves alone —
// a Reduce's result off the root — stays as it was), runs the call and
// reads the receive buffer back before its Work is done. The values are
// a few bytes: the allocation costs more than the copies.
func Host(c comm.Communicator, d *Device) comm.Communicator {
	if d == nil {
		return c
	}
	return comm.Wrap(c, &hostStaged{dev: d.dev})
}

// hostStaged is Host's comm.Decorator on a GPU world: Abort, Shrink and
// the rest of the world's capabilities pass through it.
type hostStaged struct {
	dev *nccl.Device
}

// Derive stages the host buffers of a communicator Split or Shrunk from
// the world as the world's own.
func (h *hostStaged) Derive(comm.Communicator) comm.Decorator { return h }

// Start stages call's host buffers into device memory, starts the call on
// the device buffers, and completes the returned Work once the result is
// back in the host buffer. If a buffer cannot be staged, the call is not
// started: the Work fails with the cause (the peers' calls then end as
// their communicator's failure handling says, when this rank's process
// exits with the error).
func (h *hostStaged) Start(ctx context.Context, call comm.Call, c comm.Communicator) *comm.Work {
	var staged []comm.Buffer // device buffers to free when the call is done
	free := func() {
		for _, b := range staged {
			h.dev.Free(b)
		}
	}
	onDevice := func(b comm.Buffer) (comm.Buffer, error) {
		if !b.OnHost() {
			return b, nil
		}
		db, err := h.dev.Alloc(b.DType(), b.Len())
		if err != nil {
			return b, err
		}
		staged = append(staged, db)
		return db, h.dev.Write(db, b.Bytes())
	}
	dc := call
	var err error
	dc.Send, err = onDevice(call.Send)
	if comm.SameMemory(call.Send, call.Recv) {
		dc.Recv = dc.Send
	} else if err == nil {
		dc.Recv, err = onDevice(call.Recv)
	}
	if err != nil {
		free()
		return comm.Failed(fmt.Errorf("rank %d: staging a host buffer of %v through %v: %w", c.Rank(), call.Kind, h.dev, err))
	}
	inner := c.Start(ctx, dc)
	w := comm.NewWork()
	go func() {
		err := inner.Wait()
		if err == nil && call.Recv.OnHost() && call.Recv.Len() > 0 {
			if rerr := h.dev.Read(call.Recv.Bytes(), dc.Recv); rerr != nil {
				err = fmt.Errorf("rank %d: reading the result of %v back from %v: %w", c.Rank(), call.Kind, h.dev, rerr)
			}
		}
		free()
		w.Complete(err)
	}()
	return w
}
