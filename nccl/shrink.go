package nccl

import (
	"context"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
)

// Shrink implements comm.Shrinker. The survivors agree on the failed ranks
// through the control (nexar or shared memory: it must be a
// comm.Shrinker), and make
// a new NCCL communicator of the shrunk control's ranks as New does: a
// fresh unique id over it and ncclCommInitRankScalable. That needs no
// ncclCommShrink (NCCL 2.27 and later), so it works with every NCCL this
// package loads, and costs one NCCL initialization. The new Comm has this
// one's Config (its device and stream), named for the shrink.
//
// Call it when no collective of c is in flight. c stays aborted (NCCL's
// communicator was aborted with the failure); Close it after Shrink.
func (c *Comm) Shrink(ctx context.Context) (comm.Communicator, error) {
	control, err := comm.Shrink(ctx, c.control)
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

// Shrink implements comm.Shrinker where the host communicator does: its
// shrunk communicator, staged through the same device. (A hierarchy of
// GPU nodes shrinks its staged world so.)
func (s *Staged) Shrink(ctx context.Context) (comm.Communicator, error) {
	c, err := comm.Shrink(ctx, s.inner)
	if err != nil {
		return nil, err
	}
	return NewStaged(c, s.dev), nil
}
