package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Sample is one row of one run: an operation at a size, the time per call
// (the slowest rank's, the median of the run's repeats) and the wrong
// elements its check found (0 when unchecked).
type Sample struct {
	Op    string
	Bytes int64
	US    float64
	Wrong int64
}

// ParseCSV reads the rows of one run's CSV: hiercomm-bench's -csv file or
// coll's output, several runs' appended (a sweep in two parts). Lines that
// start with "#" and repeated headers are skipped; the columns are found by
// the header's names: op, size_bytes and time_us, and wrong when present
// (empty: not checked).
func ParseCSV(r io.Reader) ([]Sample, error) {
	var out []Sample
	var col map[string]int
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f, err := csv.NewReader(strings.NewReader(line)).Read()
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		if slices.Contains(f, "op") && slices.Contains(f, "time_us") {
			col = map[string]int{}
			for i, name := range f {
				col[name] = i
			}
			for _, need := range []string{"op", "size_bytes", "time_us"} {
				if _, ok := col[need]; !ok {
					return nil, fmt.Errorf("line %d: the header has no %s column", n, need)
				}
			}
			continue
		}
		if col == nil {
			return nil, fmt.Errorf("line %d: a row before the header", n)
		}
		get := func(name string) string {
			if i, ok := col[name]; ok && i < len(f) {
				return f[i]
			}
			return ""
		}
		s := Sample{Op: get("op")}
		if s.Bytes, err = strconv.ParseInt(get("size_bytes"), 10, 64); err != nil {
			return nil, fmt.Errorf("line %d: size_bytes: %v", n, err)
		}
		if s.US, err = strconv.ParseFloat(get("time_us"), 64); err != nil || s.US <= 0 || math.IsInf(s.US, 0) {
			return nil, fmt.Errorf("line %d: time_us %q is not a positive time", n, get("time_us"))
		}
		if w := get("wrong"); w != "" {
			if s.Wrong, err = strconv.ParseInt(w, 10, 64); err != nil {
				return nil, fmt.Errorf("line %d: wrong: %v", n, err)
			}
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if col == nil {
		return nil, fmt.Errorf("no header (op,size_bytes,…,time_us)")
	}
	return out, nil
}

// Configs are the measured configurations, by name, in the order the
// tables show them. Ref is what hiercomm is set against, the prefix of
// its files (DIR/CONFIG/REF-N.csv), and RefWhat names it: OpenMPI, or,
// for the encrypted default network, hiercomm's own plain TCP in the same
// rounds (the goal there is a share of what plain TCP moves).
var Configs = []struct{ Name, What, Ref, RefWhat string }{
	{"tcp2", "TCP loopback, 2 ranks", "openmpi", "OpenMPI"},
	{"tcp4", "TCP loopback, 4 ranks", "openmpi", "OpenMPI"},
	{"shm4", "shared memory, 4 ranks on one node (OpenMPI's vader)", "openmpi", "OpenMPI"},
	{"quic4", "the default network (QUIC and its TLS lane, encrypted), 4 ranks over loopback", "tcp", "hiercomm over plain TCP"},
}

// configOf is the entry of Configs named config: an unknown one is
// described by its name and set against OpenMPI.
func configOf(config string) (what, ref, refWhat string) {
	for _, c := range Configs {
		if c.Name == config {
			return c.What, c.Ref, c.RefWhat
		}
	}
	return config, "openmpi", "OpenMPI"
}

// describe names config in words.
func describe(config string) string {
	what, _, _ := configOf(config)
	return what
}

// reference is the prefix of the files config sets hiercomm against, and
// what they measured.
func reference(config string) (prefix, what string) {
	_, prefix, what = configOf(config)
	return prefix, what
}

// Goal is one of issue 29's goals: hiercomm's time ÷ its reference's
// (OpenMPI's, or plain TCP's for the encrypted network) at most Max at
// every size it covers.
type Goal struct {
	Text   string
	Max    float64
	Covers func(config, op string, bytes int64) bool
}

// Goals are judged on every run.
var Goals = []Goal{
	{"AllReduce at 8 B, TCP loopback, 2 and 4 ranks", 1.0, func(c, op string, b int64) bool {
		return strings.HasPrefix(c, "tcp") && op == "allreduce" && b == 8
	}},
	{"AllReduce, ReduceScatter and Broadcast from 512 KiB to 64 MiB, TCP loopback", 1.0, func(c, op string, b int64) bool {
		return strings.HasPrefix(c, "tcp") && b >= 512<<10 && b <= 64<<20 && (op == "allreduce" || op == "reducescatter" || op == "broadcast")
	}},
	{"shared memory, 4 ranks, every op and size", 1.0, func(c, op string, b int64) bool { return c == "shm4" }},
	// busbw at least 0.8 of plain TCP's is a time at most 1/0.8 of it.
	{"the encrypted default network from 1 MiB, 4 ranks, against plain TCP (busbw ≥ 0.8× plain TCP's)", 1.25, func(c, op string, b int64) bool {
		return c == "quic4" && b >= 1<<20
	}},
}

// Line is one operation and size of one configuration, both sides' medians
// over the rounds that measured it on both: hiercomm's and its
// reference's (OpenMPI, or plain TCP: Configs).
type Line struct {
	Config string
	Op     string
	Bytes  int64
	// RefUS and OursUS are the medians; Ratio is OursUS ÷ RefUS.
	RefUS, OursUS, Ratio float64
	// Low and High are the least and greatest of the rounds' own ratios
	// (round i's hiercomm ÷ round i's reference), Rounds how many.
	Low, High float64
	Rounds    int
	// Wrong sums both sides' wrong elements over the rounds.
	Wrong int64
	// Goal indexes Goals, or is -1 when no goal covers the line.
	Goal int
}

// Met reports whether the line's goal holds (false without one).
func (l Line) Met() bool { return l.Goal >= 0 && l.Ratio <= Goals[l.Goal].Max }

type key struct {
	op    string
	bytes int64
}

// Compare pairs the rounds of one configuration: ref[i] (OpenMPI's, or the
// reference Configs names) and ours[i] are round i's runs. A size one
// side never measured in a round is left out of that round; a size no
// round measured on both has no line. The lines come in the order of
// ours' first round (op, then size).
func Compare(config string, ref, ours [][]Sample) []Line {
	var order []key
	seen := map[key]bool{}
	type pair struct {
		theirs, mine []float64
		ratios       []float64
		wrong        int64
	}
	by := map[key]*pair{}
	for i := range min(len(ref), len(ours)) {
		theirs := map[key]Sample{}
		for _, s := range ref[i] {
			theirs[key{s.Op, s.Bytes}] = s
		}
		for _, s := range ours[i] {
			k := key{s.Op, s.Bytes}
			t, ok := theirs[k]
			if !ok {
				continue
			}
			if !seen[k] {
				seen[k] = true
				order = append(order, k)
				by[k] = &pair{}
			}
			p := by[k]
			p.theirs, p.mine = append(p.theirs, t.US), append(p.mine, s.US)
			p.ratios = append(p.ratios, s.US/t.US)
			p.wrong += s.Wrong + t.Wrong
		}
	}
	lines := make([]Line, 0, len(order))
	for _, k := range order {
		p := by[k]
		l := Line{Config: config, Op: k.op, Bytes: k.bytes, RefUS: Median(p.theirs), OursUS: Median(p.mine),
			Low: slices.Min(p.ratios), High: slices.Max(p.ratios), Rounds: len(p.ratios), Wrong: p.wrong, Goal: -1}
		l.Ratio = l.OursUS / l.RefUS
		for i, g := range Goals {
			if g.Covers(config, k.op, k.bytes) {
				l.Goal = i
				break
			}
		}
		lines = append(lines, l)
	}
	return lines
}

// Median is the middle of v (the mean of the two middle values when
// len(v) is even); NaN for none.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Verdict is one goal over every line it covers.
type Verdict struct {
	Goal       Goal
	Lines, Met int
	// Worst is the covered line of the greatest ratio.
	Worst Line
}

// Measured reports whether any line fell under the goal.
func (v Verdict) Measured() bool { return v.Lines > 0 }

// AllMet reports whether every covered line met the goal (false when none
// was measured).
func (v Verdict) AllMet() bool { return v.Lines > 0 && v.Met == v.Lines }

// Judge returns each goal's verdict over lines, in Goals' order.
func Judge(lines []Line) []Verdict {
	out := make([]Verdict, len(Goals))
	for i, g := range Goals {
		out[i].Goal = g
	}
	for _, l := range lines {
		if l.Goal < 0 {
			continue
		}
		v := &out[l.Goal]
		v.Lines++
		if l.Met() {
			v.Met++
		}
		if v.Lines == 1 || l.Ratio > v.Worst.Ratio {
			v.Worst = l
		}
	}
	return out
}

// FormatSize writes bytes as 8 B, 512 KiB, 64 MiB.
func FormatSize(b int64) string {
	switch {
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d B", b)
}

// formatMax writes a goal's bound: 1.0, 1.25.
func formatMax(m float64) string {
	if m == math.Trunc(m) {
		return strconv.FormatFloat(m, 'f', 1, 64)
	}
	return strconv.FormatFloat(m, 'f', -1, 64)
}

// formatUS writes a time with three significant digits or more.
func formatUS(us float64) string {
	switch {
	case us >= 100:
		return strconv.FormatFloat(us, 'f', 0, 64)
	case us >= 10:
		return strconv.FormatFloat(us, 'f', 1, 64)
	}
	return strconv.FormatFloat(us, 'f', 2, 64)
}

// Floor is the machine's floor of one configuration's runs: hiercomm-bench's
// plain TCP sockets between two of its processes (blocking write(2) and
// read(2), no frames: ceilings.raw_socket in its JSON), the median over
// Runs runs that measured it.
type Floor struct {
	Config    string
	RTTUS     float64 // an 8-byte round trip
	StreamGBs float64 // one way, 1 MiB messages back to back
	Runs      int
}

// ParseFloor reads the floor from one hiercomm-bench JSON file; a run that
// did not measure it (shared memory alone, or a run older than the
// stream's measurement) gives zeros.
func ParseFloor(r io.Reader) (Floor, error) {
	var run struct {
		Ceilings struct {
			RawSocket *struct {
				RTTUS     float64 `json:"rtt_us"`
				StreamGBs float64 `json:"stream_gbs"`
			} `json:"raw_socket"`
		} `json:"ceilings"`
	}
	if err := json.NewDecoder(r).Decode(&run); err != nil {
		return Floor{}, err
	}
	if s := run.Ceilings.RawSocket; s != nil {
		return Floor{RTTUS: s.RTTUS, StreamGBs: s.StreamGBs}, nil
	}
	return Floor{}, nil
}

// MedianFloor is config's floor over runs: each figure's median over the
// runs that measured it both; Runs counts those.
func MedianFloor(config string, runs []Floor) Floor {
	var rtt, gbs []float64
	for _, f := range runs {
		if f.RTTUS > 0 && f.StreamGBs > 0 {
			rtt, gbs = append(rtt, f.RTTUS), append(gbs, f.StreamGBs)
		}
	}
	if len(rtt) == 0 {
		return Floor{Config: config}
	}
	return Floor{Config: config, RTTUS: Median(rtt), StreamGBs: Median(gbs), Runs: len(rtt)}
}

// Markdown writes the lines as one table per configuration (a row per
// size, a column per operation: hiercomm ÷ OpenMPI, ✓ or ✗ where a goal
// covers it, both medians in µs and the rounds' own ratios), under each
// TCP table the machine's floor of its runs (floors, where measured),
// then the goals' verdicts. when says where and when the figures were
// measured.
func Markdown(w io.Writer, when string, lines []Line, floors []Floor) error {
	var b strings.Builder
	if when != "" {
		fmt.Fprintf(&b, "Measured %s.\n", when)
	}
	b.WriteString("Each cell: hiercomm's time ÷ OpenMPI's (the medians over the rounds; ✓ or ✗ where a goal covers it), " +
		"then hiercomm / OpenMPI in µs per call (the slowest rank's) and, in brackets, the least and greatest of the rounds' own ratios; " +
		"where a table names another reference, it stands for OpenMPI.\n")
	var configs []string
	for _, l := range lines {
		if !slices.Contains(configs, l.Config) {
			configs = append(configs, l.Config)
		}
	}
	for _, c := range configs {
		var ops []string
		var sizes []int64
		cell := map[key]Line{}
		rounds := 0
		for _, l := range lines {
			if l.Config != c {
				continue
			}
			if !slices.Contains(ops, l.Op) {
				ops = append(ops, l.Op)
			}
			if !slices.Contains(sizes, l.Bytes) {
				sizes = append(sizes, l.Bytes)
			}
			cell[key{l.Op, l.Bytes}] = l
			rounds = max(rounds, l.Rounds)
		}
		slices.Sort(sizes)
		fmt.Fprintf(&b, "\n**%s** (%d rounds", describe(c), rounds)
		if prefix, what := reference(c); prefix != "openmpi" {
			fmt.Fprintf(&b, "; against %s", what)
		}
		b.WriteString(")\n\n| size |")
		for _, op := range ops {
			fmt.Fprintf(&b, " %s |", op)
		}
		b.WriteString("\n|---:|")
		for range ops {
			b.WriteString("---|")
		}
		b.WriteString("\n")
		for _, sz := range sizes {
			fmt.Fprintf(&b, "| %s |", FormatSize(sz))
			for _, op := range ops {
				l, ok := cell[key{op, sz}]
				if !ok {
					b.WriteString(" |")
					continue
				}
				mark := ""
				switch {
				case l.Met():
					mark = " ✓"
				case l.Goal >= 0:
					mark = " ✗"
				}
				fmt.Fprintf(&b, " %.2f×%s %s / %s [%.2f–%.2f]", l.Ratio, mark, formatUS(l.OursUS), formatUS(l.RefUS), l.Low, l.High)
				if l.Wrong != 0 {
					fmt.Fprintf(&b, " **%d wrong**", l.Wrong)
				}
				b.WriteString(" |")
			}
			b.WriteString("\n")
		}
		for _, f := range floors {
			if f.Config == c && f.Runs > 0 && strings.HasPrefix(c, "tcp") {
				fmt.Fprintf(&b, "\nThe machine's floor in the same rounds (hiercomm-bench's plain TCP sockets between two of its processes, "+
					"blocking write(2) and read(2), no frames; the median of %d runs): an 8-byte round trip takes %s µs, "+
					"and one way they move %.2f GB/s, so 1 MiB takes %s µs from one process to the other at best.\n",
					f.Runs, formatUS(f.RTTUS), f.StreamGBs, formatUS(float64(1<<20)/f.StreamGBs/1e3))
			}
		}
	}
	b.WriteString("\nGoals (hiercomm's time ÷ its reference's, at every size a goal covers):\n\n")
	for _, v := range Judge(lines) {
		switch {
		case !v.Measured():
			fmt.Fprintf(&b, "- %s ≤ %s×: not measured\n", v.Goal.Text, formatMax(v.Goal.Max))
			continue
		case v.AllMet():
			b.WriteString("- **met**: ")
		default:
			b.WriteString("- **not met**: ")
		}
		fmt.Fprintf(&b, "%s ≤ %s×: %d of %d met; the worst %.2f× (%s at %s, %s)\n", v.Goal.Text, formatMax(v.Goal.Max),
			v.Met, v.Lines, v.Worst.Ratio, v.Worst.Op, FormatSize(v.Worst.Bytes), describe(v.Worst.Config))
	}
	var wrong int64
	for _, l := range lines {
		wrong += l.Wrong
	}
	if wrong != 0 {
		fmt.Fprintf(&b, "\n**%d wrong elements** in the checked calls: those rows measured a broken collective.\n", wrong)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
