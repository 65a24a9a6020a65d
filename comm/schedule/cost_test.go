package schedule

import (
	"testing"
	"time"
)

// unit is a model in round numbers: 1 µs per message, 1 byte per ns on the
// link and in the kernel. The switch points below are worked out by hand
// from the formulas in cost.go (times in ns, N in bytes).
var unit = CostModel{Latency: time.Microsecond, BytesPerSec: 1e9, ReduceBytesPerSec: 1e9}

// boundary is a switch point of a pick: below is the largest size that
// still picks Doubling, above the smallest that picks Ring.
type boundary struct {
	p, below, above int
	why             string
}

// checkBoundaries: just below each switch point pick says Doubling, just
// above it Ring; on one rank, Doubling (no step at all).
func checkBoundaries(t *testing.T, name string, pick func(n, p int) Algorithm, bs []boundary) {
	t.Helper()
	for _, c := range bs {
		if got := pick(c.below, c.p); got != Doubling {
			t.Errorf("%s: %s(%d bytes) = %v, want doubling", c.why, name, c.below, got)
		}
		if got := pick(c.above, c.p); got != Ring {
			t.Errorf("%s: %s(%d bytes) = %v, want ring", c.why, name, c.above, got)
		}
	}
	if got := pick(1<<30, 1); got != Doubling {
		t.Errorf("one rank: %s = %v, want doubling (no step at all)", name, got)
	}
}

// TestCostAllReduceBoundaries: the AllReduce's switch points.
func TestCostAllReduceBoundaries(t *testing.T) {
	checkBoundaries(t, "AllReduce", unit.AllReduce, []boundary{
		// doubling 1000+2N, ring 2000+1.5N: equal at N = 2000.
		{2, 1999, 2001, "P=2"},
		// 3 steps with the fold: doubling 3000+6N, ring 4000+2N: equal at 250.
		{3, 249, 251, "P=3"},
		// doubling 2000+4N, ring 6000+2.25N: equal at 2285.7.
		{4, 2285, 2286, "P=4"},
		// doubling 3000+6N, ring 14000+2.625N: equal at 3259.3.
		{8, 3259, 3260, "P=8"},
		// 5 steps with the fold: doubling 5000+10N, ring 22000+2.75N: equal at 2344.8.
		{12, 2344, 2345, "P=12"},
	})
}

// TestCostReduceScatterBoundaries: the ReduceScatter's; its ring moves a
// block a step, so the switch comes well before the AllReduce's. On a
// power of two of ranks from 4, Halving, which always beats Doubling,
// until its copy of half the send buffer costs more than the latencies it
// saves.
func TestCostReduceScatterBoundaries(t *testing.T) {
	checkBoundaries(t, "ReduceScatter", unit.ReduceScatter, []boundary{
		// doubling 1000+2N, ring 1000+N: Doubling only when empty (two
		// ranks take one message whichever way: no Halving).
		{2, 0, 1, "P=2"},
	})
	for _, c := range []struct {
		p, below, above int
		why             string
	}{
		// halving 2000+2N, ring 3000+1.5N (doubling 2000+4N): equal at 2000.
		{4, 2000, 2001, "P=4"},
		// halving 3000+2.25N, ring 7000+1.75N: equal at 8000.
		{8, 8000, 8001, "P=8"},
		// halving 4000+2.375N, ring 15000+1.875N: equal at 22000.
		{16, 22000, 22001, "P=16"},
	} {
		for _, n := range []int{0, 1, c.below / 2, c.below} {
			if got := unit.ReduceScatter(n, c.p); got != Halving {
				t.Errorf("%s: ReduceScatter(%d bytes) = %v, want halving", c.why, n, got)
			}
		}
		for _, n := range []int{c.above, 4 * c.above, 1 << 30} {
			if got := unit.ReduceScatter(n, c.p); got != Ring {
				t.Errorf("%s: ReduceScatter(%d bytes) = %v, want ring", c.why, n, got)
			}
		}
	}
	// Not a power of two: Doubling or Ring, as before (P=6: doubling
	// with the fold 4000+8N, ring 5000+1.67N: equal at 157.9).
	checkBoundaries(t, "ReduceScatter", unit.ReduceScatter, []boundary{{6, 157, 158, "P=6"}})
	// P=3: doubling needs 3 steps with the fold (3000+6N), the ring 2
	// (2000+1.33N): always Ring.
	for _, n := range []int{0, 1, 1 << 20} {
		if got := unit.ReduceScatter(n, 3); got != Ring {
			t.Errorf("P=3: ReduceScatter(%d) = %v, want ring", n, got)
		}
	}
}

// TestCostBroadcastBoundaries: Chain on two ranks, Tree for messages of
// one piece, and the switch to Chain where its pipeline pays.
func TestCostBroadcastBoundaries(t *testing.T) {
	const seg = 1000
	if got := unit.Broadcast(1<<20, 2, seg); got != Chain {
		t.Errorf("P=2: Broadcast = %v, want chain", got)
	}
	// P=3: tree 2000+2N, chain (1+S)(1000+min(N,1000)) ≥ tree: always Tree.
	for _, n := range []int{0, 999, 1000, 2999, 3001, 1 << 20} {
		if got := unit.Broadcast(n, 3, seg); got != Tree {
			t.Errorf("P=3: Broadcast(%d) = %v, want tree", n, got)
		}
	}
	// P=16: tree 4000+4N; chain (14+S)·2000 for N ≥ 1000, S = ⌈N/1000⌉:
	// 54000 against 53996 at N = 12499 and 54004 at N = 12501.
	if got := unit.Broadcast(12499, 16, seg); got != Tree {
		t.Errorf("P=16: Broadcast(12499) = %v, want tree", got)
	}
	if got := unit.Broadcast(12501, 16, seg); got != Chain {
		t.Errorf("P=16: Broadcast(12501) = %v, want chain", got)
	}
}

// TestCostOneSwitch: with the default model, every world of 2 to 64 ranks
// switches AllReduce from Doubling to Ring exactly once as the size grows,
// so a size range never flips back and forth.
func TestCostOneSwitch(t *testing.T) {
	var m CostModel // zero: the defaults
	for p := 2; p <= 64; p++ {
		switches, last := 0, m.AllReduce(0, p)
		if last != Doubling {
			t.Fatalf("P=%d: empty AllReduce picks %v", p, last)
		}
		for n := 1; n <= 1<<24; n += 1024 {
			if a := m.AllReduce(n, p); a != last {
				switches++
				last = a
			}
		}
		if switches != 1 || last != Ring {
			t.Errorf("P=%d: %d switches, ending with %v", p, switches, last)
		}
	}
}

// TestCostDefaults: a zero field takes its default, a set one stays.
func TestCostDefaults(t *testing.T) {
	if got := (CostModel{}).WithDefaults(); got != DefaultCost {
		t.Errorf("zero model = %+v, want %+v", got, DefaultCost)
	}
	got := CostModel{BytesPerSec: 5e9}.WithDefaults()
	if got.BytesPerSec != 5e9 || got.Latency != DefaultCost.Latency || got.ReduceBytesPerSec != DefaultCost.ReduceBytesPerSec {
		t.Errorf("partial model = %+v", got)
	}
	if (CostModel{}).Validate() != nil {
		t.Error("the zero model is refused")
	}
	if (CostModel{Latency: -time.Second}).Validate() == nil || (CostModel{BytesPerSec: -1}).Validate() == nil {
		t.Error("a negative latency or rate is accepted")
	}
	// The zero model decides as the default one does.
	for _, n := range []int{8, 1 << 10, 64 << 10, 16 << 20} {
		if (CostModel{}).AllReduce(n, 5) != DefaultCost.AllReduce(n, 5) {
			t.Errorf("AllReduce(%d): zero and default models differ", n)
		}
	}
}
