package hierarchy

import (
	"math"
	"testing"

	"github.com/hiercomm/hiercomm/comm/schedule"
)

// Config.Switch is the one decision of the route by size: SmallBytes is
// its input (the switch given), and without it the cost model decides.
// crowded's AllReduce on 2 nodes of 2 switches at 401 bytes.
func TestSwitchTakesSmallBytesAsItsInput(t *testing.T) {
	for _, tc := range []struct {
		small  int
		at     int
		forced bool
	}{
		{0, 401, false},
		{64, 65, true},
		{400, 401, true},
		{1 << 20, 1<<20 + 1, true},
		{math.MaxInt, math.MaxInt, true},
		{-1, 0, true},
	} {
		at, forced := Config{Cost: crowded, SmallBytes: tc.small}.Switch(schedule.AllReduceOp, 2, 2)
		if at != tc.at || forced != tc.forced {
			t.Errorf("SmallBytes %d: Switch = %d, %t; want %d, %t", tc.small, at, forced, tc.at, tc.forced)
		}
	}
}
