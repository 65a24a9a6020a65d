package bench

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar"
)

// TestRunCompareLinked measures a plain world and the same world charged to
// a Link, interleaved: rows alternate, both are checked, the limited one is
// no faster than its bytes allow and reports exactly the bytes it charged.
func TestRunCompareLinked(t *testing.T) {
	const p, bits = 4, 80_000_000 // 10 MB/s
	spec := Spec{Ops: []string{"allreduce", "reducescatter", "reducescatter_ar"}, MinBytes: 64, MaxBytes: 16 << 10, Factor: 16, Warmup: 1, Iters: 2, Repeats: 1, Check: true}
	results := eachRank(t, p, func(ctx context.Context, r int, c comm.Communicator) (Result, error) {
		link, err := NewLink(bits)
		if err != nil {
			return Result{}, err
		}
		s := spec
		s.Traffic = func() (int64, error) { return link.Sent(), nil }
		return RunCompare(ctx, []Contender{{"plain", c}, {"limited", link.Wrap(c, nil)}}, s)
	})
	res := results[0]
	if got := strings.Join(res.Comms, ","); got != "plain,limited" {
		t.Errorf("Comms = %s, want plain,limited", got)
	}
	if len(res.Rows) != 3*3*2 {
		t.Fatalf("%d rows, want 18 (3 ops × 3 sizes × 2 communicators)", len(res.Rows))
	}
	for i := 0; i < len(res.Rows); i += 2 {
		a, b := res.Rows[i], res.Rows[i+1]
		if a.Comm != "plain" || b.Comm != "limited" || a.Op != b.Op || a.Bytes != b.Bytes {
			t.Fatalf("rows %d and %d are %s/%s %d B and %s/%s %d B: want the communicators interleaved per size", i, i+1, a.Comm, a.Op, a.Bytes, b.Comm, b.Op, b.Bytes)
		}
		if a.Wrong != 0 || b.Wrong != 0 {
			t.Errorf("%s %d B: #wrong %d (plain), %d (limited)", a.Op, a.Bytes, a.Wrong, b.Wrong)
		}
		if !a.HasNet || a.NetBytes != 0 || a.NetBytesMax != 0 {
			t.Errorf("plain %s %d B: net %v %v/%v, want measured and 0", a.Op, a.Bytes, a.HasNet, a.NetBytes, a.NetBytesMax)
		}
		// What one iteration charges, and the Barrier before the repeat
		// charges nothing.
		want := float64(b.Bytes) * 3 / 4
		if b.Op == "allreduce" || b.Op == "reducescatter_ar" {
			want *= 2
		}
		if b.NetBytes != want || b.NetBytesMax != want {
			t.Errorf("limited %s %d B: %v bytes per call (max %v), want %v", b.Op, b.Bytes, b.NetBytes, b.NetBytesMax, want)
		}
		if min := want / (bits / 8) * 1e6; b.TimeUS < 0.99*min {
			t.Errorf("limited %s %d B: %.0f µs per call, faster than %v bytes at 10 MB/s (%.0f µs)", b.Op, b.Bytes, b.TimeUS, want, min)
		}
	}
}

func TestRunCompareRefuses(t *testing.T) {
	cs, err := nexar.NewMemoryWorld(1, nexar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nexar.CloseAll(cs)
	other, err := nexar.NewMemoryWorld(2, nexar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nexar.CloseAll(other)
	ctx := context.Background()
	for name, cts := range map[string][]Contender{
		"none":      nil,
		"same name": {{"a", cs[0]}, {"a", cs[0]}},
		"sizes":     {{"a", cs[0]}, {"b", other[0]}},
	} {
		if _, err := RunCompare(ctx, cts, quick("allreduce")); err == nil {
			t.Errorf("%s: RunCompare accepted %d contenders", name, len(cts))
		}
	}
	// A Spec.Sync of other ranks is refused before anything runs (a
	// deadline instead of a hang if it ran first).
	spec := quick("allreduce")
	spec.Sync = cs[0]
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := RunCompare(tctx, []Contender{{"a", other[0]}}, spec); err == nil || !strings.Contains(err.Error(), "Spec.Sync is rank 0 of 1") {
		t.Errorf("RunCompare with a Sync of 1 rank beside 2: %v, want an error naming Spec.Sync", err)
	}
}

func TestLinkQueues(t *testing.T) {
	if _, err := NewLink(0); err == nil {
		t.Error("NewLink(0) accepted a rate of 0")
	}
	l, err := NewLink(8000) // 1000 B/s
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	now := t0
	l.now = func() time.Time { return now }
	if got := l.reserve(500).Sub(t0); got != 500*time.Millisecond {
		t.Errorf("500 B on an idle link end after %v, want 500ms", got)
	}
	now = t0.Add(100 * time.Millisecond)
	if got := l.reserve(1000).Sub(t0); got != 1500*time.Millisecond {
		t.Errorf("1000 B queued behind 500 B end at %v, want 1.5s (a link carries one transfer at a time)", got)
	}
	now = t0.Add(10 * time.Second)
	if got := l.reserve(1).Sub(now); got != time.Millisecond {
		t.Errorf("1 B on an idle link again takes %v, want 1ms", got)
	}
	if l.Sent() != 1501 {
		t.Errorf("Sent = %d, want 1501", l.Sent())
	}
}

func TestChargedBytes(t *testing.T) {
	buf := func(n int) comm.Buffer { return comm.Host(make([]float32, n)) }
	for _, tc := range []struct {
		call comm.Call
		p    int
		want int64
	}{
		{comm.Call{Kind: comm.KindAllReduce, Send: buf(100), Recv: buf(100)}, 4, 600},
		{comm.Call{Kind: comm.KindAllReduce, Send: buf(100), Recv: buf(100)}, 1, 0},
		{comm.Call{Kind: comm.KindAllGather, Send: buf(25), Recv: buf(100)}, 4, 300},
		{comm.Call{Kind: comm.KindReduceScatter, Send: buf(100), Recv: buf(25)}, 4, 300},
		{comm.Call{Kind: comm.KindBroadcast, Send: buf(100), Recv: buf(100)}, 2, 400},
		{comm.Call{Kind: comm.KindSend, Send: buf(10)}, 2, 40},
		{comm.Call{Kind: comm.KindRecv, Recv: buf(10)}, 2, 0},
		{comm.Call{Kind: comm.KindBarrier}, 4, 0},
	} {
		if got := ChargedBytes(tc.call, tc.p); got != tc.want {
			t.Errorf("%v on %d ranks: %d bytes, want %d", tc.call.Kind, tc.p, got, tc.want)
		}
	}
}

// compareResult is a made-up RunCompare of "hier" and "flat" AllReduce:
// hier's time per size is hierUS[i], flat's flatUS[i].
func compareResult(sizes []int64, hierUS, flatUS []float64) Result {
	r := Result{Ranks: 4, Comms: []string{"hier", "flat"}}
	for i, b := range sizes {
		r.Rows = append(r.Rows,
			Row{Op: "allreduce", Comm: "hier", Bytes: b, Timing: Timing{TimeUS: hierUS[i], BusBW: float64(b) / hierUS[i]}},
			Row{Op: "allreduce", Comm: "flat", Bytes: b, Timing: Timing{TimeUS: flatUS[i], BusBW: float64(b) / flatUS[i]}})
	}
	return r
}

func TestHierGoals(t *testing.T) {
	sizes := []int64{8, 64 << 10, 128 << 10, 4 << 20, 64 << 20}
	r := compareResult(sizes, []float64{10, 10, 10, 10, 10}, []float64{25, 20, 5, 16, 30})
	g := HierGoals(r, "hier", "flat")
	if len(g) != 2 {
		t.Fatalf("%d goals, want 2", len(g))
	}
	bw, lat := g[0], g[1]
	if !bw.Measured || !bw.Met || bw.Sizes != 2 || bw.Worst != 1.6 || bw.WorstAt != 4<<20 {
		t.Errorf("bandwidth goal = %+v, want met with worst 1.6 at 4M over 2 sizes", bw)
	}
	// 128K is outside 8 B–64 KiB, so its 0.5 does not count.
	if !lat.Measured || !lat.Met || lat.Sizes != 2 || lat.Worst != 2 {
		t.Errorf("latency goal = %+v, want met with worst 2.0 over 2 sizes", lat)
	}
	r = compareResult(sizes, []float64{10, 10, 10, 10, 10}, []float64{25, 19, 5, 14, 30})
	g = HierGoals(r, "hier", "flat")
	if g[0].Met || g[1].Met {
		t.Errorf("goals %+v met with speedups 1.4 at 4M and 1.9 at 64K", g)
	}
	var b strings.Builder
	if err := FormatGoals(&b, g); err != nil {
		t.Fatal(err)
	}
	if strings.Count(b.String(), "  not met\n") != 2 || !strings.Contains(b.String(), "worst 1.40x at 4M") {
		t.Errorf("FormatGoals:\n%s", b.String())
	}
	g = HierGoals(compareResult(sizes[:1], []float64{1}, []float64{1}), "hier", "flat")
	if g[0].Measured || g[0].Met {
		t.Errorf("bandwidth goal without a size ≥ 4M = %+v, want not measured", g[0])
	}
}

func TestCrossover(t *testing.T) {
	sizes := []int64{16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10}
	mk := func(twoD []float64) Result {
		r := compareResult(sizes, twoD, []float64{10, 10, 10, 10, 10})
		for i := range r.Rows {
			r.Rows[i].Comm = map[string]string{"hier": "2d", "flat": "lead"}[r.Rows[i].Comm]
		}
		return r
	}
	for _, tc := range []struct {
		twoD []float64
		want int64
		ok   bool
	}{
		{[]float64{20, 12, 9, 5, 3}, 64 << 10, true},
		{[]float64{20, 9, 12, 5, 3}, 128 << 10, true}, // a win below a loss does not count
		{[]float64{1, 1, 1, 1, 1}, 16 << 10, true},
		{[]float64{1, 1, 1, 1, 11}, 0, false},
	} {
		got, ok := Crossover(mk(tc.twoD), "lead", "2d")
		if got != tc.want || ok != tc.ok {
			t.Errorf("2D times %v against 10: crossover %d %v, want %d %v", tc.twoD, got, ok, tc.want, tc.ok)
		}
	}
}

func TestFormatTraffic(t *testing.T) {
	r := Result{Ranks: 4, Comms: []string{"hier", "flat"}}
	add := func(op, c string, us, net float64) {
		r.Rows = append(r.Rows, Row{Op: op, Comm: c, Bytes: 1 << 20, Timing: Timing{TimeUS: us, HasNet: true, NetBytes: net, NetBytesMax: net}})
	}
	add("reducescatter", "hier", 100, 250)
	add("reducescatter", "flat", 200, 750)
	add("reducescatter_ar", "hier", 300, 500)
	add("reducescatter_ar", "flat", 400, 1000)
	var b strings.Builder
	if err := FormatTraffic(&b, r, []string{"hier", "flat"}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"hier RS", "flat AR+copy", "flat RS 2.00x faster, 67% less traffic", "hier AR+copy 3.00x faster, 50% less traffic", "flat AR+copy 4.00x faster, 75% less traffic"} {
		if !strings.Contains(out, want) {
			t.Errorf("FormatTraffic lacks %q:\n%s", want, out)
		}
	}
}

// logged is a contender that logs its Barriers (one before each timed
// repeat, without Check) and makes its first slow Broadcasts sleep.
type logged struct {
	comm.Communicator
	name string
	log  *[]string // rank 0's only
	mu   *sync.Mutex
	slow int // Broadcasts still to slow down
}

func (l *logged) Barrier(ctx context.Context) error {
	if l.log != nil {
		l.mu.Lock()
		*l.log = append(*l.log, l.name)
		l.mu.Unlock()
	}
	return l.Communicator.Barrier(ctx)
}

func (l *logged) Broadcast(ctx context.Context, buf comm.Buffer, root int) error {
	if l.slow > 0 {
		l.slow--
		time.Sleep(5 * time.Millisecond)
	}
	return l.Communicator.Broadcast(ctx, buf, root)
}

// runLogged runs RunCompare with two logged contenders over one 2-rank
// world and returns rank 0's Result and Barrier log.
func runLogged(t *testing.T, spec Spec, slow int) (Result, []string) {
	t.Helper()
	var log []string
	var mu sync.Mutex
	res := eachRank(t, 2, func(ctx context.Context, r int, c comm.Communicator) (Result, error) {
		a := &logged{Communicator: c, name: "a", mu: &mu, slow: slow}
		b := &logged{Communicator: c, name: "b", mu: &mu, slow: slow}
		if r == 0 {
			a.log, b.log = &log, &log
		}
		return RunCompare(ctx, []Contender{{"a", a}, {"b", b}}, spec)
	})
	return res[0], log
}

// TestRunCompareAlternatesRepeats: the contenders' timed repeats take
// turns (a, b, a, b, …) at each size and form, so that a slow stretch of
// the machine is shared instead of falling on one of them.
func TestRunCompareAlternatesRepeats(t *testing.T) {
	spec := Spec{Ops: []string{"allreduce"}, MinBytes: 8, MaxBytes: 16, Factor: 2, Warmup: 1, Iters: 2, Repeats: 3, InPlace: true}
	res, log := runLogged(t, spec, 0)
	// 2 sizes × 2 forms × 3 repeats, alternating.
	want := strings.Repeat("a,b,", 2*2*3)
	if got := strings.Join(log, ",") + ","; got != want {
		t.Errorf("the Barriers before the timed repeats came as %s, want %s", got, want)
	}
	if len(res.Rows) != 4 || res.Rows[0].Comm != "a" || res.Rows[1].Comm != "b" || res.Rows[0].InPlace == nil || res.Rows[1].InPlace == nil {
		t.Errorf("rows %+v: want a, b at each size, each with its in-place form", res.Rows)
	}
}

// TestRunCompareSync: with Spec.Sync, every contender's timed repeats
// start at Sync's Barrier, not at their own (TestRunCompareRefuses: a Sync
// that holds other ranks is refused).
func TestRunCompareSync(t *testing.T) {
	for _, check := range []bool{false, true} {
		t.Run(fmt.Sprintf("check=%t", check), func(t *testing.T) { testRunCompareSync(t, check) })
	}
}

// testRunCompareSync: with the check, each contender's check run is one
// more, started at Sync's Barrier too.
func testRunCompareSync(t *testing.T, check bool) {
	spec := Spec{Ops: []string{"allreduce"}, MinBytes: 8, MaxBytes: 8, Warmup: 1, Iters: 2, Repeats: 3, Check: check}
	var log []string
	var mu sync.Mutex
	eachRank(t, 2, func(ctx context.Context, r int, c comm.Communicator) (Result, error) {
		a := &logged{Communicator: c, name: "a", mu: &mu}
		b := &logged{Communicator: c, name: "b", mu: &mu}
		s := &logged{Communicator: c, name: "sync", mu: &mu}
		if r == 0 {
			a.log, b.log, s.log = &log, &log, &log
		}
		sp := spec
		sp.Sync = s
		return RunCompare(ctx, []Contender{{"a", a}, {"b", b}}, sp)
	})
	n := 2 * 3 // 2 contenders × 3 repeats
	if check {
		n += 2
	}
	if got, want := strings.Join(log, ","), strings.TrimSuffix(strings.Repeat("sync,", n), ","); got != want {
		t.Errorf("the Barriers before the timed repeats came as %s, want %s", got, want)
	}
}

// TestRunRechecksTheIterationCount: warmups that each caught a stall (5 ms
// here) make the calibration choose a handful of iterations; the first
// timed repeat, far shorter than the budget, chooses again from its own
// time and is not kept.
func TestRunRechecksTheIterationCount(t *testing.T) {
	spec := Spec{Ops: []string{"broadcast"}, MinBytes: 8, MaxBytes: 8, Warmup: 3, Budget: 40 * time.Millisecond, Repeats: 2}
	res, log := runLogged(t, spec, 3)
	for _, row := range res.Rows {
		// The warmups alone give 40 ms / 5 ms = 8 iterations.
		if row.Iters <= 8 || row.Repeats != 2 {
			t.Errorf("%s: %d iterations × %d repeats, want more than the 8 the stalled warmups imply, × 2", row.Comm, row.Iters, row.Repeats)
		}
	}
	// One repeat each is thrown away: a, b, then the two kept of each.
	if got := strings.Join(log, ","); got != "a,b,a,b,a,b" {
		t.Errorf("the Barriers before the timed repeats came as %s, want a,b,a,b,a,b", got)
	}
}

// TestLossesBeyondTheSpread: a size where the hierarchy is slower counts as
// a loss only when the repeats' quartiles keep it below the goal; the
// in-place form is judged too, and FormatLosses names each loss.
func TestLossesBeyondTheSpread(t *testing.T) {
	row := func(op, c string, b int64, us, lo, hi float64) Row {
		return Row{Op: op, Comm: c, Bytes: b, Timing: Timing{TimeUS: us, LowUS: lo, HighUS: hi}}
	}
	r := Result{Ranks: 4, Comms: []string{"hier", "flat"}, Rows: []Row{
		row("broadcast", "hier", 8, 10, 8, 13), row("broadcast", "flat", 8, 8, 7, 10), // 0.80, range 0.54–1.25: noise
		row("broadcast", "hier", 16, 10, 9.5, 10.5), row("broadcast", "flat", 16, 8, 7.8, 8.2), // 0.80, range 0.74–0.86: a loss
		row("allreduce", "hier", 8, 10, 9, 11), row("allreduce", "flat", 8, 20, 19, 21), // 2.0
	}}
	in := Timing{TimeUS: 10, LowUS: 9.9, HighUS: 10.1}
	r.Rows[4].InPlace = &in
	r.Rows[5].InPlace = &Timing{TimeUS: 5, LowUS: 4.9, HighUS: 5.1} // in place: 0.5, a loss
	p := Pairs(r, "broadcast", "hier", "flat")
	if lo, hi := p[0].Range(); math.Abs(lo-7.0/13) > 1e-9 || math.Abs(hi-10.0/8) > 1e-9 || p[0].Loses(HierNeverLoses) {
		t.Errorf("broadcast 8 B: range %.3f–%.3f, loses %v; want 0.538–1.250, no loss", lo, hi, p[0].Loses(HierNeverLoses))
	}
	losses, worst, judged := Losses(r, "hier", "flat")
	if judged != 4 || len(losses) != 2 || losses[0].Bytes != 16 || !losses[1].InPlace || worst.Speedup() != 0.5 {
		t.Fatalf("Losses: %d judged, losses %+v, worst %+v; want 4 judged, broadcast 16 B and allreduce 8 B in place, worst 0.5", judged, losses, worst)
	}
	var b strings.Builder
	if err := FormatLosses(&b, r, "hier", "flat"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"worst 0.50x at allreduce 8 in place", "2 of 4 beyond the spread  not met\n", "0.80x at broadcast 16 (range 0.74–0.86)"} {
		if !strings.Contains(out, want) {
			t.Errorf("FormatLosses lacks %q:\n%s", want, out)
		}
	}
	// Without quartiles (an old result), a slower size is a loss.
	r.Rows[0].LowUS, r.Rows[0].HighUS = 0, 0
	if losses, _, _ := Losses(r, "hier", "flat"); len(losses) != 3 {
		t.Errorf("without quartiles, %d losses, want 3", len(losses))
	}
}

// delayed is a logged communicator whose AllReduce sleeps first.
type delayed struct {
	*logged
	d time.Duration
}

func (c *delayed) AllReduce(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp) error {
	time.Sleep(c.d)
	return c.logged.AllReduce(ctx, send, recv, op)
}

// TestRunCompareSettles: with Spec.Settle, a size where the first
// contender may be slower than Settle times the second is timed Repeats
// more times, alternating, and its row counts every repeat; a size where
// it is clearly fast enough is not. A size timed once (too long to
// repeat) where the first is slower is run twice more on each.
func TestRunCompareSettles(t *testing.T) {
	run := func(spec Spec, slowA, slowB time.Duration) (Result, string) {
		var log []string
		var mu sync.Mutex
		res := eachRank(t, 2, func(ctx context.Context, r int, c comm.Communicator) (Result, error) {
			a := &delayed{&logged{Communicator: c, name: "a", mu: &mu}, slowA}
			b := &delayed{&logged{Communicator: c, name: "b", mu: &mu}, slowB}
			if r == 0 {
				a.log, b.log = &log, &log
			}
			return RunCompare(ctx, []Contender{{"a", a}, {"b", b}}, spec)
		})
		return res[0], strings.Join(log, ",")
	}
	spec := Spec{Ops: []string{"allreduce"}, MinBytes: 8, MaxBytes: 8, Warmup: 1, Iters: 3, Repeats: 3, Settle: 0.95}
	// a at a third of b's speed: not settled, timed 3 more times.
	res, log := run(spec, 2*time.Millisecond, 0)
	if want := strings.TrimSuffix(strings.Repeat("a,b,", 6), ","); log != want {
		t.Errorf("a slower: Barriers %s, want %s", log, want)
	}
	for _, row := range res.Rows {
		if row.Repeats != 6 {
			t.Errorf("a slower: %s's row has %d repeats, want 6", row.Comm, row.Repeats)
		}
	}
	// a three times as fast: settled at once.
	res, log = run(spec, 0, 2*time.Millisecond)
	if want := "a,b,a,b,a,b"; log != want || res.Rows[0].Repeats != 3 {
		t.Errorf("a faster: Barriers %s with %d repeats, want %s with 3", log, res.Rows[0].Repeats, want)
	}
	// Timed once: one call outlasts Repeats × Budget.
	long := Spec{Ops: []string{"allreduce"}, MinBytes: 8, MaxBytes: 8, Warmup: 2, Budget: time.Millisecond, Repeats: 3, Settle: 0.95}
	for _, c := range []struct {
		slowA, slowB time.Duration
		repeats      int
	}{{40 * time.Millisecond, 10 * time.Millisecond, 3}, {10 * time.Millisecond, 40 * time.Millisecond, 1}} {
		res, _ = run(long, c.slowA, c.slowB)
		for _, row := range res.Rows {
			if row.Iters != 1 || row.Repeats != c.repeats {
				t.Errorf("timed once, a %v, b %v: %s's row has %d iterations × %d repeats, want 1 × %d", c.slowA, c.slowB, row.Comm, row.Iters, row.Repeats, c.repeats)
			}
		}
	}
	// No Settle, no second look.
	spec.Settle = 0
	if _, log = run(spec, 2*time.Millisecond, 0); log != "a,b,a,b,a,b" {
		t.Errorf("without Settle: Barriers %s, want a,b,a,b,a,b", log)
	}
	if _, err := (Spec{Settle: -1}).withDefaults(2); err == nil || !strings.Contains(err.Error(), "Settle") {
		t.Errorf("Settle -1: %v; want an error naming Settle", err)
	}
}

// TestFormatBytes: the traffic columns keep 3 significant digits and a
// binary prefix that keeps the number under 1024 (it once wrote
// 1.02e+03K for a count just under 1 MiB).
func TestFormatBytes(t *testing.T) {
	for _, tc := range []struct {
		b    float64
		want string
	}{
		{0, "0"}, {98, "98"}, {1023, "1023"}, {1023.6, "1.00K"}, {2263, "2.21K"}, {8396, "8.20K"}, {24986, "24.4K"},
		{97792, "95.5K"}, {1047961, "1023K"}, {1048064, "1.00M"}, {1080033, "1.03M"}, {3 << 30, "3.00G"},
	} {
		if got := formatBytes(tc.b); got != tc.want {
			t.Errorf("formatBytes(%v) = %q, want %q", tc.b, got, tc.want)
		}
	}
}
