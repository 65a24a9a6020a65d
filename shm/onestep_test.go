package shm

import (
	"testing"

	"github.com/hiercomm/hiercomm/comm/schedule"
)

// Config.OneStepReduce is the one decision of an AllReduce's steps:
// SmallReduceBytes is its input (the switch given, over all ranks'
// bytes together), without it the cost model decides, and either way
// only what fits half a slot takes one step.
func TestOneStepReduceTakesSmallReduceBytesAsItsInput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Config
		n      int
		one    bool
		forced bool
	}{
		{"the model, 2 ranks, small", Config{Size: 2}, 1 << 10, true, false},
		{"the model, 4 ranks, large", Config{Size: 4}, 1 << 20, false, false},
		{"given, at it", Config{Size: 4, SmallReduceBytes: 4096}, 1024, true, true},
		{"given, a byte above", Config{Size: 4, SmallReduceBytes: 4096}, 1025, false, true},
		{"given, above the model's", Config{Size: 4, SmallReduceBytes: 1 << 22}, 1 << 20, true, true},
		{"given negative: two steps", Config{Size: 2, SmallReduceBytes: -1}, 8, false, true},
		{"half a slot bounds it", Config{Size: 2, SmallReduceBytes: 1 << 40, SlotBytes: 64 << 10}, 32<<10 + 1, false, false},
		{"half a slot, at it", Config{Size: 2, SmallReduceBytes: 1 << 40, SlotBytes: 64 << 10}, 32 << 10, true, true},
		{"a model that never takes one step", Config{Size: 4, Cost: schedule.CostModel{Latency: 1, BytesPerSec: 1e9, ReduceBytesPerSec: 1, Direct: true}}, 4096, false, false},
	} {
		one, forced := tc.cfg.OneStepReduce(tc.n)
		if one != tc.one || forced != tc.forced {
			t.Errorf("%s: OneStepReduce(%d) = %t, %t; want %t, %t", tc.name, tc.n, one, forced, tc.one, tc.forced)
		}
	}
}
