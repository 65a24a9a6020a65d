package shm

import (
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
)

// Route says, for logs (hiercomm's per-call trace), how shared memory
// runs call on this communicator: eagerly (a small Broadcast or Scatter:
// the root stages its message and returns), an AllReduce or Reduce in one
// step (every rank reduces the whole message from the others' staged
// copies) or in steps (each rank reduces its slice, chunk by chunk), or
// staged step by step (the rest).
func (c *Comm) Route(call comm.Call) string {
	how := "staged step by step"
	switch {
	case c.eager(call.Signature()):
		how = "eager: the root stages it and returns"
	case call.Kind == comm.KindAllReduce || call.Kind == comm.KindReduce:
		if c.oneStep(call.Send.ByteLen()) {
			how = "one step: every rank reduces the whole"
		} else {
			how = "in steps: each rank reduces its slice"
		}
	case call.Kind == comm.KindSend || call.Kind == comm.KindRecv:
		how = "point-to-point"
	}
	return fmt.Sprintf("%s, %d ranks", how, c.size)
}
