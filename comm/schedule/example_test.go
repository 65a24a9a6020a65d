package schedule_test

import (
	"fmt"
	"time"

	"github.com/hiercomm/hiercomm/comm/schedule"
)

// A hierarchy's route for AllReduce, on 2 nodes of 2 ranks and on 4 of 8,
// with shared memory inside the nodes and a 100 µs, 1 GB/s network between
// them: where every rank has a core, the 2D route for every message but
// the empty one (shared memory's node steps cost the same on both routes,
// and the rails carry 1/G of it); where
// the host's cores are shared two ranks each (an emulated cluster), the
// leads route up to a size where the rails' bytes outweigh the crowding.
func ExampleHierarchy_Switch() {
	h := schedule.Hierarchy{
		Intra: schedule.CostModel{Latency: 4 * time.Microsecond, BytesPerSec: 8e9, ReduceBytesPerSec: 8e9, Direct: true},
		Inter: schedule.CostModel{Latency: 100 * time.Microsecond, BytesPerSec: 1e9, ReduceBytesPerSec: 4e9},
	}
	for _, rpc := range []float64{0.25, 2} {
		h.RanksPerCore = rpc
		fmt.Printf("%g ranks a core: 2D from %d bytes on 2×2, from %d bytes on 4×8\n",
			rpc, h.Switch(schedule.AllReduceOp, 2, 2), h.Switch(schedule.AllReduceOp, 8, 4))
	}
	// Output:
	// 0.25 ranks a core: 2D from 1 bytes on 2×2, from 1 bytes on 4×8
	// 2 ranks a core: 2D from 133819 bytes on 2×2, from 81378 bytes on 4×8
}
