package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// The hierarchical communicator's speed goals (issue 5), judged on a
// RunCompare of the hierarchical and the flat communicator of the same
// processes over rate-limited inter-node links.
const (
	// HierBandwidthGoal: hierarchical AllReduce busbw ÷ flat busbw at
	// every size ≥ HierBandwidthFrom.
	HierBandwidthGoal = 1.5
	HierBandwidthFrom = 4 << 20
	// HierLatencyGoal: flat AllReduce time ÷ hierarchical time at every
	// size in [HierLatencyFrom, HierLatencyUpTo].
	HierLatencyGoal = 2.0
	HierLatencyFrom = 8
	HierLatencyUpTo = 64 << 10
)

// Pair is one operation at one size measured on two communicators.
type Pair struct {
	Op    string
	Bytes int64
	A, B  Row
	// InPlace: A's and B's Timing are their rows' in-place forms (Losses).
	InPlace bool
}

// Speedup is B's time ÷ A's: how many times faster A is (equal to A's
// busbw ÷ B's). It is 0 when a time is missing.
func (p Pair) Speedup() float64 {
	if p.A.TimeUS <= 0 || p.B.TimeUS <= 0 {
		return 0
	}
	return p.B.TimeUS / p.A.TimeUS
}

// Range is the speedup's spread: B's first quartile ÷ A's third, and B's
// third ÷ A's first (Timing.LowUS, HighUS). When it holds 1, the two
// differ by less than one repeat of either differs from the next: on a
// machine whose cores are shared, a pipelined small call strays by tens of
// percent from one 30 ms repeat to the next, and a speedup inside its
// range says nothing. Both are 0 when a quartile is missing.
func (p Pair) Range() (lo, hi float64) {
	if p.A.LowUS <= 0 || p.A.HighUS <= 0 || p.B.LowUS <= 0 || p.B.HighUS <= 0 {
		return 0, 0
	}
	return p.B.LowUS / p.A.HighUS, p.B.HighUS / p.A.LowUS
}

// Loses reports whether A is slower than B by more than the noise: its
// speedup under want, and the whole of its Range under want too (a
// missing Range counts as no spread).
func (p Pair) Loses(want float64) bool {
	up := p.Speedup()
	if up == 0 || up >= want {
		return false
	}
	if _, hi := p.Range(); hi >= want {
		return false
	}
	return true
}

// Pairs matches the rows of op on communicators a and b by size, in a's
// order.
func Pairs(r Result, op, a, b string) []Pair {
	bs := map[int64]Row{}
	for _, row := range r.rowsOn(op, b) {
		bs[row.Bytes] = row
	}
	var out []Pair
	for _, row := range r.rowsOn(op, a) {
		if o, ok := bs[row.Bytes]; ok {
			out = append(out, Pair{Op: op, Bytes: row.Bytes, A: row, B: o})
		}
	}
	return out
}

// FormatComparison prints, for every operation measured on both a and b,
// a table of the two times and busbw per size and a's speedup over b.
func FormatComparison(w io.Writer, r Result, a, b string) error {
	var s strings.Builder
	for _, t := range r.tables() {
		if t.comm != a {
			continue
		}
		pairs := Pairs(r, t.op, a, b)
		if len(pairs) == 0 {
			continue
		}
		fmt.Fprintf(&s, "# %s: %s vs %s (speedup = %s busbw / %s busbw = %s time / %s time)\n", t.op, a, b, a, b, b, a)
		fmt.Fprintf(&s, "# %10s  %9s  %9s  %8s  %8s  %7s  %11s\n", "size(B)", a+"(us)", b+"(us)", a+"GB/s", b+"GB/s", "speedup", "range")
		for _, p := range pairs {
			rng := ""
			if lo, hi := p.Range(); hi > 0 {
				rng = fmt.Sprintf("%.2f–%.2f", lo, hi)
			}
			fmt.Fprintf(&s, "  %10d  %9s  %9s  %8s  %8s  %7.2f  %11s\n", p.Bytes, formatTime(p.A.TimeUS), formatTime(p.B.TimeUS), bwFloat(p.A.BusBW, 8), bwFloat(p.B.BusBW, 8), p.Speedup(), rng)
		}
		s.WriteString("#\n")
	}
	_, err := io.WriteString(w, s.String())
	return err
}

// Goal is one speed goal judged on a range of sizes: the worst speedup
// over them, and where.
type Goal struct {
	What     string
	From, To int64
	Want     float64
	Sizes    int     // sizes in range measured on both
	Worst    float64 // the smallest speedup among them
	WorstAt  int64
	Median   float64 // the median speedup among them
	Met      bool
	Measured bool
}

// HierGoals judges issue 5's AllReduce goals on a RunCompare of the
// hierarchical communicator hier and the flat one flat: busbw ≥ 1.5× from
// 4 MiB, and ≥ 2× faster from 8 B to 64 KiB, at every size.
func HierGoals(r Result, hier, flat string) []Goal {
	pairs := Pairs(r, "allreduce", hier, flat)
	judge := func(what string, from, to int64, want float64) Goal {
		g := Goal{What: what, From: from, To: to, Want: want, Worst: math.Inf(1)}
		var ups []float64
		for _, p := range pairs {
			if p.Bytes < from || p.Bytes > to {
				continue
			}
			up := p.Speedup()
			ups = append(ups, up)
			if up < g.Worst {
				g.Worst, g.WorstAt = up, p.Bytes
			}
		}
		g.Sizes, g.Measured = len(ups), len(ups) > 0
		if g.Measured {
			g.Median = median(ups)
			g.Met = g.Worst >= want
		} else {
			g.Worst = 0
		}
		return g
	}
	return []Goal{
		judge("allreduce busbw "+hier+"/"+flat, HierBandwidthFrom, math.MaxInt64, HierBandwidthGoal),
		judge("allreduce speedup "+hier+"/"+flat, HierLatencyFrom, HierLatencyUpTo, HierLatencyGoal),
	}
}

// FormatGoals prints goals as lines ending "met" or "not met" (verdict).
func FormatGoals(w io.Writer, goals []Goal) error {
	var s strings.Builder
	s.WriteString("# Speed goals of the hierarchical communicator against the flat one (informational):\n")
	for _, g := range goals {
		to := FormatSize(g.To)
		if g.To == math.MaxInt64 {
			to = "max"
		}
		if !g.Measured {
			fmt.Fprintf(&s, "#   %s over %s–%s ≥ %.1fx: not measured (no size in range)\n", g.What, FormatSize(g.From), to, g.Want)
			continue
		}
		fmt.Fprintf(&s, "#   %s over %s–%s ≥ %.1fx at every size: worst %sx at %s, median %.2fx over %d sizes  %s\n",
			g.What, FormatSize(g.From), to, g.Want, goalRatio(g.Worst, g.Want, true), FormatSize(g.WorstAt), g.Median, g.Sizes, verdict(g.Met))
	}
	_, err := io.WriteString(w, s.String())
	return err
}

// HierNeverLoses is issue 15's goal for every operation the hierarchical
// communicator and the flat one both measured: the hierarchy at least this
// fraction of flat's speed at every size, in both forms. A size below it
// whose speedup's spread (Pair.Range) still reaches it is not counted a
// loss (Pair.Loses).
const HierNeverLoses = 0.95

// Losses judges HierNeverLoses on a RunCompare of hier and flat: the pairs
// (per operation and size, out of place then in place, in the order
// measured) where hier loses beyond the spread (Pair.Loses), the worst
// speedup of all pairs and its pair, and how many pairs were judged.
func Losses(r Result, hier, flat string) (losses []Pair, worst Pair, judged int) {
	for _, t := range r.tables() {
		if t.comm != hier {
			continue
		}
		for _, p := range Pairs(r, t.op, hier, flat) {
			forms := []Pair{p}
			if p.A.InPlace != nil && p.B.InPlace != nil {
				in := p
				in.A.Timing, in.B.Timing = *p.A.InPlace, *p.B.InPlace
				in.A.InPlace, in.B.InPlace, in.InPlace = nil, nil, true
				forms = append(forms, in)
			}
			for _, f := range forms {
				if f.Speedup() == 0 {
					continue
				}
				judged++
				if judged == 1 || f.Speedup() < worst.Speedup() {
					worst = f
				}
				if f.Loses(HierNeverLoses) {
					losses = append(losses, f)
				}
			}
		}
	}
	return losses, worst, judged
}

// FormatLosses prints Losses as a goal line, met or not met, and each loss.
func FormatLosses(w io.Writer, r Result, hier, flat string) error {
	losses, worst, judged := Losses(r, hier, flat)
	if judged == 0 {
		return nil
	}
	form := func(p Pair) string {
		f := ""
		if p.InPlace {
			f = " in place"
		}
		rng := ""
		if lo, hi := p.Range(); hi > 0 {
			rng = fmt.Sprintf(" (range %.2f–%.2f)", lo, hi)
		}
		return fmt.Sprintf("%.2fx at %s %s%s%s", p.Speedup(), p.Op, FormatSize(p.Bytes), f, rng)
	}
	var s strings.Builder
	fmt.Fprintf(&s, "#   every operation, size and form %s/%s ≥ %.2fx, or within the repeats' spread: worst %s; %d of %d beyond the spread  %s\n",
		hier, flat, HierNeverLoses, form(worst), len(losses), judged, verdict(len(losses) == 0))
	for _, p := range losses {
		fmt.Fprintf(&s, "#     %s\n", form(p))
	}
	_, err := io.WriteString(w, s.String())
	return err
}

// FormatTraffic prints ReduceScatter on each communicator of comms against
// AllReduce-then-copy (reducescatter_ar) on the same: the time and the
// inter-node bytes per iteration sent by the busiest rank, and the traffic
// a's ReduceScatter saves against each other variant at the largest size.
func FormatTraffic(w io.Writer, r Result, comms []string) error {
	type variant struct{ op, comm, label string }
	var vs []variant
	for _, op := range []string{"reducescatter", "reducescatter_ar"} {
		for _, c := range comms {
			if len(r.rowsOn(op, c)) > 0 {
				label := c + " RS"
				if op == "reducescatter_ar" {
					label = c + " AR+copy"
				}
				vs = append(vs, variant{op, c, label})
			}
		}
	}
	if len(vs) < 2 {
		return nil
	}
	rows := make([]map[int64]Row, len(vs))
	var sizes []int64
	hasNet := false
	for i, v := range vs {
		rows[i] = map[int64]Row{}
		for _, row := range r.rowsOn(v.op, v.comm) {
			rows[i][row.Bytes] = row
			hasNet = hasNet || row.HasNet
			if i == 0 {
				sizes = append(sizes, row.Bytes)
			}
		}
	}
	var s strings.Builder
	s.WriteString("# reducescatter vs the same result by a full allreduce and a copy (AR+copy): time per call")
	if hasNet {
		s.WriteString(" and inter-node bytes sent per call by the busiest rank (mean rank in brackets)")
	}
	s.WriteString("\n#  size(B)")
	for _, v := range vs {
		fmt.Fprintf(&s, "  %22s", v.label)
	}
	s.WriteString("\n")
	for _, b := range sizes {
		fmt.Fprintf(&s, "  %8d", b)
		for i := range vs {
			row, ok := rows[i][b]
			switch {
			case !ok:
				fmt.Fprintf(&s, "  %22s", "-")
			case row.HasNet:
				fmt.Fprintf(&s, "  %7sus %6s(%6s)", strings.TrimSpace(formatTime(row.TimeUS)), formatBytes(row.NetBytesMax), formatBytes(row.NetBytes))
			default:
				fmt.Fprintf(&s, "  %20sus", strings.TrimSpace(formatTime(row.TimeUS)))
			}
		}
		s.WriteString("\n")
	}
	if len(sizes) > 0 {
		b := sizes[len(sizes)-1]
		first := rows[0][b]
		fmt.Fprintf(&s, "# at %s, %s against:", FormatSize(b), vs[0].label)
		for i := 1; i < len(vs); i++ {
			o, ok := rows[i][b]
			if !ok {
				continue
			}
			fmt.Fprintf(&s, " %s %.2fx faster", vs[i].label, o.TimeUS/first.TimeUS)
			if first.HasNet && o.HasNet && o.NetBytesMax > 0 {
				fmt.Fprintf(&s, ", %.0f%% less traffic on the busiest NIC (%.0f%% mean);", 100*(1-first.NetBytesMax/o.NetBytesMax), 100*(1-first.NetBytes/o.NetBytes))
			} else {
				s.WriteString(";")
			}
		}
		s.WriteString("\n#\n")
	}
	_, err := io.WriteString(w, s.String())
	return err
}

// formatBytes writes a byte count in at most 5 characters: with the
// binary prefix (K, M, G) that keeps it under 1024, and 3 significant
// digits ("98", "2.21K", "8.20K", "1023K", "1.00M").
func formatBytes(b float64) string {
	units := []string{"", "K", "M", "G"}
	u := 0
	for u < len(units)-1 && roundSig3(b) >= 1024 {
		b /= 1024
		u++
	}
	switch {
	case u == 0 || b >= 100:
		return fmt.Sprintf("%.0f%s", b, units[u])
	case b >= 10:
		return fmt.Sprintf("%.1f%s", b, units[u])
	}
	return fmt.Sprintf("%.2f%s", b, units[u])
}

// roundSig3 is b rounded as formatBytes writes it: to 3 significant
// digits, or to an integer from 100 up.
func roundSig3(b float64) float64 {
	switch {
	case b >= 100:
		return math.Round(b)
	case b >= 10:
		return math.Round(b*10) / 10
	}
	return math.Round(b*100) / 100
}

// Crossover is the smallest size at which large's AllReduce is at least
// as fast as small's at that size and at every larger size measured: the
// switch point from the latency path to the bandwidth path. ok is false
// when large never wins at the largest size.
func Crossover(r Result, small, large string) (bytes int64, ok bool) {
	pairs := Pairs(r, "allreduce", large, small)
	for i := len(pairs) - 1; i >= 0; i-- {
		if pairs[i].Speedup() < 1 {
			break
		}
		bytes, ok = pairs[i].Bytes, true
	}
	return bytes, ok
}
