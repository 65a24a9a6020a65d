package shm

import (
	"cmp"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/schedule"
)

// Route says, for logs (hiercomm's per-call trace), how shared memory
// runs call on this communicator: eagerly (a small Broadcast or Scatter:
// the root stages its message and returns; a small Gather or Reduce:
// every rank stages its part, and all but the root return), an AllReduce
// or Reduce in one step (every rank reduces the whole message from the
// others' staged copies) or in steps (each rank reduces its slice, chunk
// by chunk), or staged step by step (the rest).
func (c *Comm) Route(call comm.Call) string {
	how := "staged step by step"
	switch {
	case c.eager(call.Signature()) && (call.Kind == comm.KindGather || call.Kind == comm.KindReduce):
		how = "eager: every rank stages its part, the others return"
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

// oneStep reports whether an AllReduce or Reduce of n bytes takes one step
// (see allReduce), on this communicator's segment (oneStep).
func (c *Comm) oneStep(n int) bool {
	one, _ := oneStep(n, c.seg.l.slotBytes, c.size, c.cfg.Cost, c.cfg.SmallReduceBytes)
	return one
}

// OneStepReduce reports whether an AllReduce or Reduce of n bytes on Size
// ranks of a communicator made with c takes one step (every rank reduces
// the whole message) or two, and whether SmallReduceBytes decided it
// rather than Cost: the decision the communicator makes (oneStep), for
// hiercomm's Plan to report. Zero fields take their defaults.
func (c Config) OneStepReduce(n int) (one, bySmallReduceBytes bool) {
	slot := cmp.Or(c.SlotBytes, DefaultSlotBytes) &^ (2*lineBytes - 1)
	return oneStep(n, max(slot, 256*c.Size), c.Size, c.Cost.Or(DefaultCost), c.SmallReduceBytes)
}

// oneStep is the one decision of an AllReduce's or Reduce's steps: n
// bytes per rank on p ranks whose staging slots hold slot bytes take one
// step only when they fit half a slot, and then where small
// (Config.SmallReduceBytes) is set, when all ranks' together are at most
// small (bySmall: it is the switch given to the model, negative for
// never), else when cost predicts one step no slower than two
// (schedule.CostModel.OneStepReduce).
func oneStep(n, slot, p int, cost schedule.CostModel, small int) (one, bySmall bool) {
	switch {
	case n > slot/2:
		return false, false
	case small != 0:
		return n*p <= small, true
	}
	return cost.OneStepReduce(n, p), false
}
