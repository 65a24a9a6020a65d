package bench

import (
	"slices"
	"time"
)

// CopyRow is the single-thread copy() bandwidth at one size: the memory
// ceiling the shared-memory communicator's goals are judged against.
type CopyRow struct {
	Bytes int64
	GBs   float64 // bytes copied per second / 1e9, median of the repeats
}

// CopySizes are the sizes MeasureCopy uses by default: those the
// intra-node bandwidth goal is judged at.
var CopySizes = []int64{1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20}

// MeasureCopy times copy() between two buffers of each size on one
// goroutine, repeats times per size (after one untimed copy that faults
// the pages in), and reports the median. Run it while nothing else runs.
func MeasureCopy(sizes []int64, repeats int) []CopyRow {
	if repeats < 1 {
		repeats = 5
	}
	maxSize := slices.Max(sizes)
	src, dst := make([]byte, maxSize), make([]byte, maxSize)
	for i := range src {
		src[i] = byte(i)
	}
	rows := make([]CopyRow, 0, len(sizes))
	for _, n := range sizes {
		s, d := src[:n], dst[:n]
		copy(d, s)
		// Enough copies per repeat to last a few milliseconds.
		iters := max(1, int((8<<20)/n))
		rates := make([]float64, repeats)
		for r := range rates {
			t0 := time.Now()
			for range iters {
				copy(d, s)
			}
			rates[r] = float64(n) * float64(iters) / time.Since(t0).Seconds() / 1e9
		}
		slices.Sort(rates)
		rows = append(rows, CopyRow{Bytes: n, GBs: rates[len(rates)/2]})
	}
	return rows
}

// intraGoals are the shared-memory communicator's goals (issue: the CPU
// intra-node tier), judged on single-node runs.
const (
	// IntraBandwidthGoal: AllReduce busbw at every size in
	// [IntraFrom, IntraUpTo] is at least this fraction of the same run's
	// single-thread copy() bandwidth at that size.
	IntraBandwidthGoal = 0.40
	IntraFrom          = 1 << 20
	IntraUpTo          = 16 << 20
	// IntraLatencyGoalUS: an 8-byte AllReduce on IntraLatencyRanks ranks
	// takes less than this many microseconds (median).
	IntraLatencyGoalUS = 5.0
	IntraLatencyRanks  = 4
)
