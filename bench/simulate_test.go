package bench

import (
	"math"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/comm/schedule"
)

// TestSimulateCountsAndTimes checks the simulator against what the
// schedules must cost: a ring AllReduce is 2(P−1) hops of one block each,
// recursive doubling log₂ P exchanges of the whole vector.
func TestSimulateCountsAndTimes(t *testing.T) {
	const n, seg, es = 1 << 12, 1 << 20, 4
	for _, p := range []int{2, 3, 4, 8, 64} {
		res, err := Simulate(p, es, func(r int) schedule.Schedule { return schedule.RingAllReduce(p, r, n, seg) }, SimModel{Alpha: 1})
		if err != nil {
			t.Fatalf("ring P=%d: %v", p, err)
		}
		if want := float64(2 * (p - 1)); res.Seconds != want {
			t.Errorf("ring P=%d with α=1, β=0: %v s, want %v (2(P−1) hops)", p, res.Seconds, want)
		}
		for r := range p {
			if res.Messages[r] != 2*(p-1) {
				t.Errorf("ring P=%d: rank %d sent %d messages, want %d", p, r, res.Messages[r], 2*(p-1))
			}
		}
		var sum int64
		for _, b := range res.Bytes {
			sum += b
		}
		if want := int64(2 * (p - 1) * n * es); sum != want {
			t.Errorf("ring P=%d: %d bytes sent in all, want 2(P−1)·n = %d", p, sum, want)
		}
		// β alone: every rank's link carries 2(P−1)/P of the vector, one
		// block after another.
		res, err = Simulate(p, es, func(r int) schedule.Schedule { return schedule.RingAllReduce(p, r, n, seg) }, SimModel{Beta: 1e-9})
		if err != nil {
			t.Fatal(err)
		}
		if want := 2 * float64(p-1) / float64(p) * n * es * 1e-9; math.Abs(res.Seconds-want) > want*0.01+1e-12 && n%p == 0 {
			t.Errorf("ring P=%d with β only: %v s, want %v", p, res.Seconds, want)
		}
	}
	res, err := Simulate(8, es, func(r int) schedule.Schedule { return schedule.DoublingAllReduce(8, r, 16, seg) }, SimModel{Alpha: 1})
	if err != nil || res.Seconds != 3 {
		t.Errorf("doubling P=8: %v s, %v; want 3 exchanges", res.Seconds, err)
	}
	// Intra-node links cost their own α. On 2 nodes of 4, rank 2's block
	// travels 2→3→4→…→1: 5 hops within a node and 2 across, the longest
	// path; ranks 3 and 7 send every block they pass on across nodes.
	res, err = Simulate(8, es, func(r int) schedule.Schedule { return schedule.RingAllGather(8, r, 8, seg) }, SimModel{Alpha: 10, IntraAlpha: 1, RanksPerNode: 4})
	if err != nil || res.Seconds != 5*1+2*10 || res.MaxInterBytes() != 7*8*es || res.InterBytes[0] != 0 {
		t.Errorf("ring allgather on 2 nodes of 4: %v s, inter-node bytes %v, %v; want 25 s, 224 B from ranks 3 and 7 only", res.Seconds, res.InterBytes, err)
	}
}

func TestSimulateRefusesUnpaired(t *testing.T) {
	_, err := Simulate(2, 4, func(r int) schedule.Schedule {
		s := schedule.RingAllGather(2, r, 8, 8)
		if r == 1 {
			return schedule.Schedule{Lanes: 1} // rank 1 never sends
		}
		return s
	}, SimModel{Alpha: 1})
	if err == nil || !strings.Contains(err.Error(), "rank 0 is stuck") {
		t.Errorf("unpaired schedules: %v, want rank 0 stuck", err)
	}
}

func TestFitAlphaBeta(t *testing.T) {
	var rows []Row
	for b := int64(8); b <= 64<<20; b *= 4 {
		rows = append(rows, Row{Op: "sendrecv", Bytes: b, Timing: Timing{TimeUS: 100 + float64(b)/1e8*1e6}})
	}
	a, beta, ok := FitAlphaBeta(rows)
	if !ok || math.Abs(a-100e-6) > 2e-6 || math.Abs(beta-1e-8)/1e-8 > 0.01 {
		t.Errorf("fit: α %v β %v %v; want 100 µs and 1e-8 s/B", a, beta, ok)
	}
	if _, _, ok := FitAlphaBeta(rows[:3]); ok {
		t.Error("a fit without a size ≥ 1 MiB")
	}
}

// TestPredictScale predicts flat and hierarchical collectives on 256
// ranks (32 nodes of 8): the flat ring's messages and the hierarchy's
// smaller inter-node traffic follow from the schedules.
func TestPredictScale(t *testing.T) {
	const nodes, g, es = 32, 8, 4
	p := nodes * g
	inter := SimModel{Alpha: 5e-6, Beta: 1 / 50e9, ReduceBytesPerSec: 20e9}
	intra := SimModel{Alpha: 1e-6, Beta: 1 / 900e9, IntraAlpha: 1e-6, IntraBeta: 1 / 900e9, ReduceBytesPerSec: 20e9}
	flatModel := inter
	flatModel.IntraAlpha, flatModel.IntraBeta, flatModel.RanksPerNode = intra.Alpha, intra.Beta, g
	const bytes = 16 << 20
	flat, err := PredictFlat("allreduce", p, bytes, es, flatModel)
	if err != nil {
		t.Fatal(err)
	}
	if flat.Messages[0] != 2*(p-1) {
		t.Errorf("flat ring on %d ranks: %d messages from rank 0, want %d", p, flat.Messages[0], 2*(p-1))
	}
	hier, hierInter, err := PredictHier("allreduce", nodes, g, bytes, es, inter, intra, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	// Flat: every node's last rank sends 2(P−1)/P of the vector across;
	// the hierarchy's rail carries 2(nodes−1)/nodes of one 1/g shard.
	if want := int64(2 * (nodes - 1) * (bytes / g / nodes)); hierInter != want {
		t.Errorf("hierarchy: %d inter-node bytes per rank, want %d", hierInter, want)
	}
	if flat.MaxInterBytes() <= hierInter || hier >= flat.Seconds {
		t.Errorf("flat %v s and %d B across, hierarchy %v s and %d B: want the hierarchy ahead at 16 MiB", flat.Seconds, flat.MaxInterBytes(), hier, hierInter)
	}
}

// TestSimulateBackToBack: calls that follow each other overlap where ranks
// may run ahead. A tree broadcast's root returns once it has sent, so in
// a loop the root's link (3 messages per call on 8 ranks) sets the pace,
// not the tree's depth; a ring AllReduce cannot run ahead, so its time
// per call stays its latency.
func TestSimulateBackToBack(t *testing.T) {
	const p, es = 8, 4
	m := SimModel{Alpha: 1, Beta: 1e-3, Calls: 10}
	tree, err := Simulate(p, es, func(r int) schedule.Schedule { return schedule.TreeBroadcast(p, r, 0, 1, 1) }, m)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(tree.Seconds-3*(1+0.004)) > 0.01 || math.Abs(tree.PerCall-3*0.004) > 1e-9 {
		t.Errorf("tree broadcast: first call %v s, %v s per call; want about 3.012 and 0.012 (the root's link)", tree.Seconds, tree.PerCall)
	}
	if tree.Messages[0] != 3 {
		t.Errorf("the root sent %d messages per call, want 3", tree.Messages[0])
	}
	// With a send overhead the root pays it for each of its 3 sends,
	// whatever their lanes: back-to-back calls go no faster than that.
	m.SendOverhead = 0.5
	tree, err = Simulate(p, es, func(r int) schedule.Schedule { return schedule.TreeBroadcast(p, r, 0, 1, 1) }, m)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(tree.PerCall-3*0.5) > 1e-9 {
		t.Errorf("tree broadcast with a send overhead of 0.5 s: %v s per call; want 1.5 (the root's three sends)", tree.PerCall)
	}
	m.SendOverhead = 0
	ring, err := Simulate(p, es, func(r int) schedule.Schedule { return schedule.RingAllReduce(p, r, 16, 1<<20) }, m)
	if err != nil {
		t.Fatal(err)
	}
	if ring.PerCall < 0.9*ring.Seconds {
		t.Errorf("ring allreduce: %v s per call back to back, %v s alone; want about the same", ring.PerCall, ring.Seconds)
	}
}

// TestCacheBeta: the cache-resident β is fitted from 16 KiB to
// CacheBytes, applies to calls up to CacheBytes, and is joined to the
// large sizes' β geometrically up to 4·CacheBytes.
func TestCacheBeta(t *testing.T) {
	var rows []Row
	for b := int64(8); b <= 64<<20; b *= 2 {
		perByte := 1e-9 // 1 GB/s, streaming
		if b <= CacheBytes {
			perByte = 0.25e-9 // 4 GB/s in the caches
		}
		rows = append(rows, Row{Op: "sendrecv", Bytes: b, Timing: Timing{TimeUS: (50e-6 + float64(b)*perByte) * 1e6}})
	}
	alpha, beta, ok := FitAlphaBeta(rows)
	if !ok {
		t.Fatal("no fit")
	}
	cb, ok := FitCacheBeta(rows, alpha)
	if !ok || math.Abs(cb-0.25e-9)/0.25e-9 > 0.05 {
		t.Fatalf("cache β %v, %v; want 0.25 ns/B", cb, ok)
	}
	if _, ok := FitCacheBeta(rows[:5], alpha); ok {
		t.Error("a cache β without a size from 16 KiB")
	}
	m := SimModel{Alpha: alpha, Beta: beta, IntraBeta: 2 * beta, CacheBeta: cb, CacheBytes: CacheBytes}
	for _, c := range []struct {
		bytes      int64
		want, intr float64
	}{
		{8, cb, cb},
		{CacheBytes, cb, cb},
		{2 * CacheBytes, math.Sqrt(cb * beta), math.Sqrt(cb * 2 * beta)},
		{4 * CacheBytes, beta, 2 * beta},
		{64 << 20, beta, 2 * beta},
	} {
		got := m.ForCall(c.bytes)
		if math.Abs(got.Beta-c.want)/c.want > 1e-9 || math.Abs(got.IntraBeta-c.intr)/c.intr > 1e-9 || got.CacheBeta != 0 {
			t.Errorf("ForCall(%d): β %v, intra %v, cache %v; want %v, %v, 0", c.bytes, got.Beta, got.IntraBeta, got.CacheBeta, c.want, c.intr)
		}
	}
	if got := (SimModel{Beta: beta}).ForCall(8); got.Beta != beta {
		t.Errorf("without CacheBeta, ForCall changed β: %v", got.Beta)
	}
}

// TestSelfSpread counts the rows whose two forms differ by more than 25%
// either way, on the named communicator only, and names the worst.
func TestSelfSpread(t *testing.T) {
	row := func(comm, op string, bytes int64, out, in float64) Row {
		r := Row{Op: op, Bytes: bytes, Comm: comm, Timing: Timing{TimeUS: out}}
		if in > 0 {
			r.InPlace = &Timing{TimeUS: in}
		}
		return r
	}
	r := Result{Rows: []Row{
		row("flat", "allreduce", 8, 10, 10),
		row("flat", "allreduce", 16, 10, 13), // 1.3: beyond
		row("flat", "allreduce", 32, 20, 10), // 2: beyond, the worst
		row("flat", "allgather", 8, 10, 8.2), // 1.22: within
		row("flat", "broadcast", 8, 10, 0),   // one form only: not counted
		row("hier", "allreduce", 8, 100, 10), // another communicator
	}}
	got := SelfSpread(r, "flat")
	want := Spread{Rows: 4, Beyond: 2, Worst: 2, WorstOp: "allreduce", WorstBytes: 32}
	if got != want {
		t.Errorf("SelfSpread = %+v, want %+v", got, want)
	}
}
