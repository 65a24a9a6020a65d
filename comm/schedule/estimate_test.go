package schedule

import (
	"math"
	"strings"
	"testing"
	"time"
)

// The switch points below are worked out by hand from the formulas in
// estimate.go with the unit model (1 µs per message or step, 1 byte per ns
// for the link, the copy and the kernel); times in ns, N in bytes.

// TestOneStepReduceBoundaries: shm's one-step AllReduce against its two
// steps. one = 1000 + N + (P−1)N, two = 2000 + N + 2(P−1)/P·N.
func TestOneStepReduceBoundaries(t *testing.T) {
	direct := unit
	direct.Direct = true
	for _, n := range []int{0, 1, 1 << 10, 1 << 20, 1 << 30} {
		// P=2: one = 1000 + 2N, two = 2000 + 2N: always one step.
		if !direct.OneStepReduce(n, 2) {
			t.Errorf("P=2: OneStepReduce(%d) = false, want true", n)
		}
	}
	for _, c := range []struct{ p, last int }{
		{4, 666}, // 1000 + 4N against 2000 + 2.5N: equal at 666.7
		{8, 190}, // 1000 + 8N against 2000 + 2.75N: equal at 190.5
	} {
		if !direct.OneStepReduce(c.last, c.p) {
			t.Errorf("P=%d: OneStepReduce(%d) = false, want true", c.p, c.last)
		}
		if direct.OneStepReduce(c.last+1, c.p) {
			t.Errorf("P=%d: OneStepReduce(%d) = true, want false", c.p, c.last+1)
		}
	}
}

// TestEstimate checks a few estimates against the formulas by hand.
func TestEstimate(t *testing.T) {
	direct := unit
	direct.Direct = true
	for _, c := range []struct {
		m    CostModel
		c    Collective
		n, p int
		ns   float64
	}{
		{unit, AllReduceOp, 1000, 4, 2000 + 4*1000},        // doubling: 2 steps of N
		{unit, AllReduceOp, 100000, 4, 6000 + 2.25*100000}, // ring
		{unit, ReduceScatterOp, 4000, 4, 3000 + 3000 + 3000},
		{unit, AllGatherOp, 4000, 4, 3000 + 3000},
		{unit, ReduceOp, 1000, 5, 3 * (1000 + 2000)}, // ⌈log₂ 5⌉ = 3 levels
		{unit, BroadcastOp, 1000, 4, 2 * (1000 + 1000)},
		{unit, BroadcastOp, 1000, 1, 0},
		{direct, AllReduceOp, 100, 4, 1000 + 100 + 300},           // one step
		{direct, AllReduceOp, 10000, 4, 2000 + 10000 + 2*7500},    // two steps
		{direct, ReduceScatterOp, 4000, 4, 1000 + 4000 + 3000},    // stage all, reduce a quarter from 4
		{direct, AllGatherOp, 4000, 4, 1000 + 1000 + 3000},        // stage own, copy the others'
		{direct, BroadcastOp, 4000, 4, 1000 + 4000 + 4000},        // stage, copy out
		{unit.Shared(2), BroadcastOp, 1000, 2, 2000 + 1000},       // latency doubled, link not
		{unit.Shared(2), ReduceOp, 1000, 2, 2000 + 1000 + 2000},   // the kernel halved
		{unit.Shared(0.5), ReduceOp, 1000, 2, 1000 + 1000 + 1000}, // a core each: unchanged
	} {
		got := c.m.Estimate(c.c, c.n, c.p) * 1e9
		if math.Abs(got-c.ns) > 1e-6*c.ns+1e-6 {
			t.Errorf("%+v: Estimate(%v, %d, %d) = %.1f ns, want %.1f", c.m, c.c, c.n, c.p, got, c.ns)
		}
	}
}

// TestSharedCPU: a CPU-bound transport's byte rate is shared, the link's
// is not.
func TestSharedCPU(t *testing.T) {
	m := CostModel{Latency: time.Microsecond, BytesPerSec: 1e9, ReduceBytesPerSec: 1e9, CPUBytesPerSec: 0.5e9}
	if got := m.Time(0, 1000, 0) * 1e9; math.Abs(got-2000) > 1e-6 {
		t.Errorf("CPU-bound: 1000 bytes take %.1f ns, want 2000 (the CPU's rate)", got)
	}
	if got := m.Shared(4).Time(0, 1000, 0) * 1e9; math.Abs(got-8000) > 1e-6 {
		t.Errorf("CPU-bound, 4 ranks a core: 1000 bytes take %.1f ns, want 8000", got)
	}
	if got := unit.Shared(4).Time(0, 1000, 0) * 1e9; math.Abs(got-1000) > 1e-6 {
		t.Errorf("link-bound, 4 ranks a core: 1000 bytes take %.1f ns, want 1000 (the link's rate)", got)
	}
}

// TestHierarchyRoute: without crowded cores the 2D route wins at every
// size (its steps are as many, its rails carry half); with two ranks a
// core the leads route wins up to 400 bytes.
func TestHierarchyRoute(t *testing.T) {
	free := Hierarchy{Intra: unit, Inter: unit}
	// leads 3000 + 5N, 2D 3000 + 2.5N.
	if got := free.Route(AllReduceOp, 0, 2, 2); got != Leads {
		t.Errorf("empty AllReduce: %v, want leads (a tie)", got)
	}
	for _, n := range []int{1, 400, 1 << 20} {
		if got := free.Route(AllReduceOp, n, 2, 2); got != TwoD {
			t.Errorf("free cores: AllReduce(%d) takes %v, want 2d", n, got)
		}
	}
	// Two ranks a core: node steps and the 2D rails at half speed, the
	// leads' rail (one rank of two busy) at full: leads 5000 + 6N, 2D
	// 6000 + 3.5N, equal at N = 400.
	crowded := free
	crowded.RanksPerCore = 2
	if got := crowded.Route(AllReduceOp, 400, 2, 2); got != Leads {
		t.Errorf("crowded: AllReduce(400) takes %v, want leads", got)
	}
	if got := crowded.Route(AllReduceOp, 401, 2, 2); got != TwoD {
		t.Errorf("crowded: AllReduce(401) takes %v, want 2d", got)
	}
	if got := crowded.Switch(AllReduceOp, 2, 2); got != 401 {
		t.Errorf("crowded: Switch(AllReduce) = %d, want 401", got)
	}
	if got := free.Switch(AllReduceOp, 2, 2); got != 1 {
		t.Errorf("free cores: Switch(AllReduce) = %d, want 1 (leads only for the empty message)", got)
	}
	if got := (Hierarchy{Inter: unit, Intra: CostModel{Latency: time.Hour}}).Switch(BroadcastOp, 8, 2); got != math.MaxInt {
		t.Errorf("node steps of an hour: Switch(Broadcast) = %d, want never", got)
	}
	// Switch is where the predicted winner changes for good: wherever the
	// routes' costs are apart by more than rounding, Route agrees with it.
	for _, c := range []Collective{AllReduceOp, BroadcastOp, ReduceOp} {
		for g := 1; g <= 8; g++ {
			for m := 1; m <= 8; m++ {
				s := crowded.Switch(c, g, m)
				for n := 64; n <= 1<<26; n *= 2 {
					l, d := crowded.Estimate(c, Leads, n, g, m), crowded.Estimate(c, TwoD, n, g, m)
					if math.Abs(l-d) < 0.05*min(l, d) {
						continue // a near tie: either is right
					}
					if want := map[bool]Route{true: TwoD, false: Leads}[n >= s]; (d < l) != (want == TwoD) {
						t.Errorf("%v on %d nodes of %d, %d bytes: leads %.0f ns, 2d %.0f ns, but Switch = %d", c, m, g, n, l*1e9, d*1e9, s)
					}
				}
			}
		}
	}
}

// TestHierarchyWake: on crowded cores each step of a phase whose ranks
// outnumber the cores costs Wake more. The 2D Broadcast has one node step
// more than the leads route, and its rail step is crowded where the
// leads' is not, so Wake moves its switch up by 2·Wake of the rails'
// half-message time; with a core per rank, Wake costs nothing.
func TestHierarchyWake(t *testing.T) {
	crowded := Hierarchy{Intra: unit, Inter: unit, RanksPerCore: 2}
	woken := crowded
	woken.Wake = time.Microsecond
	for n := range 20000 {
		l, d := crowded.Estimate(BroadcastOp, Leads, n, 2, 2), crowded.Estimate(BroadcastOp, TwoD, n, 2, 2)
		wl, wd := woken.Estimate(BroadcastOp, Leads, n, 2, 2), woken.Estimate(BroadcastOp, TwoD, n, 2, 2)
		if math.Abs((wl-l)-1e-6) > 1e-12 || math.Abs((wd-d)-3e-6) > 1e-12 {
			t.Fatalf("Broadcast of %d bytes: Wake of 1 µs added %.3f µs to leads and %.3f µs to 2d, want 1 and 3", n, (wl-l)*1e6, (wd-d)*1e6)
		}
	}
	// Half the message over a rail at 1 byte per ns: 2 µs more is 4000 bytes.
	if a, b := crowded.Switch(BroadcastOp, 2, 2), woken.Switch(BroadcastOp, 2, 2); b-a < 3990 || b-a > 4010 {
		t.Errorf("Broadcast's switch: %d without Wake, %d with 1 µs; want 4000 bytes apart", a, b)
	}
	free, freeWoken := Hierarchy{Intra: unit, Inter: unit}, Hierarchy{Intra: unit, Inter: unit, Wake: time.Hour}
	for _, c := range []Collective{AllReduceOp, BroadcastOp, ReduceOp} {
		if a, b := free.Switch(c, 2, 2), freeWoken.Switch(c, 2, 2); a != b {
			t.Errorf("%v with a core per rank: switch %d without Wake, %d with an hour's", c, a, b)
		}
	}
}

func TestHierarchyValidate(t *testing.T) {
	for _, h := range []Hierarchy{
		{RanksPerCore: -1},
		{RanksPerCore: math.NaN()},
		{Wake: -time.Microsecond},
		{Intra: CostModel{Latency: -time.Second}},
		{Inter: CostModel{CPUBytesPerSec: -1}},
	} {
		err := h.Validate()
		if err == nil {
			t.Errorf("%+v: Validate = nil", h)
		}
	}
	if err := (Hierarchy{}).Validate(); err != nil {
		t.Errorf("zero Hierarchy: %v", err)
	}
	if err := (Hierarchy{Inter: CostModel{Latency: -1}}).Validate(); err == nil || !strings.Contains(err.Error(), "inter-node") {
		t.Errorf("a bad inter model: %v, want it named", err)
	}
}

func TestOr(t *testing.T) {
	got := CostModel{Latency: time.Millisecond}.Or(CostModel{Latency: time.Second, BytesPerSec: 5, Direct: true})
	want := CostModel{Latency: time.Millisecond, BytesPerSec: 5, Direct: true}
	if got != want {
		t.Errorf("Or = %+v, want %+v", got, want)
	}
}
