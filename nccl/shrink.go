package nccl

import (
	"context"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
)

// Shrink implements comm.Communicator. The survivors agree on the failed
// ranks through the control (nexar or shared memory), and make a new NCCL
// communicator of the shrunk control's ranks as New does: a
// fresh unique id over it and ncclCommInitRankScalable. That needs no
// ncclCommShrink (NCCL 2.27 and later), so it works with every NCCL this
// package loads, and costs one NCCL initialization. The new Comm has this
// one's Config (its device and stream), named for the shrink.
//
// Call it when no collective of c is in flight. c stays aborted (NCCL's
// communicator was aborted with the failure); Close it after Shrink.
func (c *Comm) Shrink(ctx context.Context) (comm.Communicator, error) {
	control, err := c.control.Shrink(ctx)
	if err != nil {
		return nil, c.opError(comm.KindShrink, 0, -1, fmt.Errorf("shrinking the control (%T), over which the survivors agree and the new unique id travels: %w", c.control, err))
	}
	cfg := c.cfg
	cfg.Name = fmt.Sprintf("%s/shrink(%d of %d)", c.cfg.Name, control.Size(), c.size)
	nc, err := New(ctx, control, cfg)
	if err != nil {
		return nil, c.opError(comm.KindShrink, 0, -1, err)
	}
	return nc, nil
}

// Shrink implements comm.Communicator: the host communicator's shrunk one, staged through the same device. (A hierarchy of
// GPU nodes shrinks its staged world so.)
func (s *Staged) Shrink(ctx context.Context) (comm.Communicator, error) {
	c, err := s.inner.Shrink(ctx)
	if err != nil {
		return nil, err
	}
	return NewStaged(c, s.dev), nil
}
