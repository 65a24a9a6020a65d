package nccl

import (
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
)

// ncclCalls are the NCCL calls launch makes for each kind of call.
var ncclCalls = map[comm.Kind]string{
	comm.KindAllReduce:     "ncclAllReduce",
	comm.KindBroadcast:     "ncclBroadcast",
	comm.KindReduce:        "ncclReduce",
	comm.KindAllGather:     "ncclAllGather",
	comm.KindReduceScatter: "ncclReduceScatter",
	comm.KindBarrier:       "ncclAllReduce of one byte",
	comm.KindAllToAll:      "ncclSend and ncclRecv in one group",
	comm.KindAllToAllV:     "ncclSend and ncclRecv in one group",
	comm.KindGather:        "ncclSend and ncclRecv in one group",
	comm.KindScatter:       "ncclSend and ncclRecv in one group",
	comm.KindScan:          "ncclAllGather, combined on the host",
	comm.KindExScan:        "ncclAllGather, combined on the host",
	comm.KindSend:          "ncclSend",
	comm.KindRecv:          "ncclRecv",
}

// Route says, for logs (hiercomm's per-call trace), which NCCL calls this
// communicator makes for call, as launch issues them.
func (c *Comm) Route(call comm.Call) string {
	how, ok := ncclCalls[call.Kind]
	dt := call.Signature().DType
	_, native := c.nativeOp(dt, call.Op)
	switch {
	case call.Kind.Reduces() && !native && call.Kind != comm.KindScan && call.Kind != comm.KindExScan:
		how = fmt.Sprintf("gathered on the GPU and combined on the host (%s)", c.whyOnHost(dt, call.Op))
	case call.Kind.Reduces() && call.Op == comm.PreMulSum && call.Kind != comm.KindScan && call.Kind != comm.KindExScan:
		how += " with an op of ncclRedOpCreatePreMulSum"
	case !ok:
		how = call.Kind.String()
	}
	return fmt.Sprintf("%s, %d ranks", how, c.size)
}

// Route says, for logs, how a Staged communicator runs call: device
// buffers staged through page-locked host memory, then the host
// communicator's route where it says (a Route method of its own).
func (s *Staged) Route(call comm.Call) string {
	how := "staged through host memory"
	if r, ok := s.inner.(interface{ Route(comm.Call) string }); ok {
		how += ": " + r.Route(call)
	}
	return how
}
