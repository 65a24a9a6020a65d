package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	rows := func(op string, pts ...[3]float64) []Row { // {bytes, time µs, busbw}
		var out []Row
		for _, p := range pts {
			out = append(out, Row{Op: op, Bytes: int64(p[0]), Timing: Timing{TimeUS: p[1], BusBW: p[2]}})
		}
		return out
	}
	var res Result
	res.Ranks = 4
	res.Rows = append(res.Rows, rows("allreduce", [3]float64{8, 150, 0}, [3]float64{16 << 20, 0, 0.9}, [3]float64{32 << 20, 0, 0.9}, [3]float64{64 << 20, 0, 0.8})...)
	res.Rows = append(res.Rows, rows("sendrecv", [3]float64{8, 50, 0}, [3]float64{16 << 20, 0, 1}, [3]float64{32 << 20, 0, 1})...)

	s := Summarize(res)
	// Bandwidth: the largest size ≥ 16 MiB that both have is 32 MiB.
	if !s.HasBandwidth || s.BandwidthBytes != 32<<20 || math.Abs(s.BandwidthRatio-0.9) > 1e-12 || !s.BandwidthMet() {
		t.Errorf("bandwidth: %+v", s)
	}
	var b bytes.Buffer
	if err := s.Format(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"= 0.90 (goal ≥ 0.85)  met\n", "at 32M"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("Format output lacks %q:\n%s", want, b.String())
		}
	}
	// No line compares the AllReduce with the run's own sendrecv (which
	// hid what both cost): the raw latency lines judge small calls.
	if strings.Contains(b.String(), "latency:") {
		t.Errorf("a latency line without the bare transport measured:\n%s", b.String())
	}

	// Below the goal.
	res.Rows[2].BusBW = 0.5 // allreduce 32 MiB
	s = Summarize(res)
	if s.BandwidthMet() {
		t.Errorf("below: %+v", s)
	}
	b.Reset()
	s.Format(&b)
	if strings.Count(b.String(), "  not met\n") != 1 {
		t.Errorf("want one line not met:\n%s", b.String())
	}
}

func TestSummarizeMissing(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  Result
	}{
		{"no sendrecv", Result{Ranks: 4, Rows: []Row{{Op: "allreduce", Bytes: 8, Timing: Timing{TimeUS: 1}}, {Op: "allreduce", Bytes: 64 << 20, Timing: Timing{BusBW: 1}}}}},
		{"small sizes only", Result{Ranks: 4, Rows: []Row{{Op: "allreduce", Bytes: 1 << 20, Timing: Timing{TimeUS: 9, BusBW: 1}}, {Op: "sendrecv", Bytes: 1 << 20, Timing: Timing{TimeUS: 9, BusBW: 1}}}}},
		{"one rank", Result{Ranks: 1, Rows: []Row{{Op: "allreduce", Bytes: 8, Timing: Timing{TimeUS: 1}}, {Op: "sendrecv", Bytes: 8, Timing: Timing{TimeUS: 1}}}}},
	} {
		s := Summarize(tc.res)
		if s.HasBandwidth || s.BandwidthMet() {
			t.Errorf("%s: %+v, want no bandwidth ratio", tc.name, s)
		}
		var b bytes.Buffer
		s.Format(&b)
		if strings.Count(b.String(), "n/a (") != 1 {
			t.Errorf("%s: want one n/a line:\n%s", tc.name, b.String())
		}
	}
}

func TestSummarizeIntra(t *testing.T) {
	res := Result{Ranks: 4, Nodes: 1, Rows: []Row{
		{Op: "allreduce", Bytes: 8, Timing: Timing{TimeUS: 3.5}},
		{Op: "allreduce", Bytes: 1 << 20, Timing: Timing{BusBW: 4}},
		{Op: "allreduce", Bytes: 4 << 20, Timing: Timing{BusBW: 3}},
		{Op: "allreduce", Bytes: 64 << 20, Timing: Timing{BusBW: 0.1}}, // outside 1–16 MiB: not judged
	}}
	res.Copy = []CopyRow{{Bytes: 1 << 20, GBs: 8}, {Bytes: 4 << 20, GBs: 6}, {Bytes: 16 << 20, GBs: 5}}
	s := Summarize(res)
	// 4/8 = 0.5 at 1 MiB, 3/6 = 0.5 at 4 MiB: the minimum is 0.5 (the first found).
	if !s.HasIntra || math.Abs(s.IntraRatio-0.5) > 1e-12 || !s.IntraMet() {
		t.Errorf("intra bandwidth: %+v", s)
	}
	if !s.HasIntra8B || s.Intra8BUS != 3.5 || !s.Intra8BMet() {
		t.Errorf("intra latency: %+v", s)
	}
	var b bytes.Buffer
	s.Format(&b)
	for _, want := range []string{"intra bandwidth", "= 0.50 (goal ≥ 0.40)  met\n", "allreduce at 8 B = 3.50 us (goal < 5 us on 4 ranks)  met\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("Format output lacks %q:\n%s", want, b.String())
		}
	}

	res.Rows[2].BusBW = 2 // 2/6 = 0.33 at 4 MiB
	res.Rows[0].TimeUS = 9
	s = Summarize(res)
	if s.IntraBytes != 4<<20 || s.IntraMet() || s.Intra8BMet() {
		t.Errorf("below: %+v", s)
	}

	res.Nodes = 2
	if s = Summarize(res); s.HasIntra || s.HasIntra8B {
		t.Errorf("a two-node run was judged by the intra-node goals: %+v", s)
	}
	b.Reset()
	s.Format(&b)
	if strings.Contains(b.String(), "intra") {
		t.Errorf("a two-node run prints intra goals:\n%s", b.String())
	}
}

func TestMeasureCopy(t *testing.T) {
	rows := MeasureCopy([]int64{1 << 10, 64 << 10}, 3)
	if len(rows) != 2 || rows[0].Bytes != 1<<10 || rows[1].Bytes != 64<<10 {
		t.Fatalf("rows %+v", rows)
	}
	for _, r := range rows {
		if r.GBs <= 0 || math.IsInf(r.GBs, 0) {
			t.Errorf("copy of %d bytes: %v GB/s", r.Bytes, r.GBs)
		}
	}
}

// TestSummaryRawLatency: with the bare transport's round trip measured,
// every compared communicator's smallest AllReduce (2.5 round trips on 4
// ranks, 1.5 on 2) and sendrecv (1.2) is judged against it; without it,
// no line.
func TestSummaryRawLatency(t *testing.T) {
	res := Result{Ranks: 4, RawRTTUS: 40, Comms: []string{"hier", "flat"}}
	for _, p := range [][2]float64{{8, 150}, {64, 90}, {128, 80}} {
		res.Rows = append(res.Rows, Row{Op: "allreduce", Comm: "hier", Bytes: int64(p[0]), Timing: Timing{TimeUS: p[1]}})
		res.Rows = append(res.Rows, Row{Op: "allreduce", Comm: "flat", Bytes: int64(p[0]), Timing: Timing{TimeUS: p[1] / 2}})
	}
	res.Rows = append(res.Rows, Row{Op: "sendrecv", Comm: "flat", Bytes: 8, Timing: Timing{TimeUS: 44}})
	s := Summarize(res)
	// The smallest size ≤ 64 B: 8 B; hier 150 / 40 = 3.75 > 2.5, flat
	// 75 / 40 = 1.875; flat's sendrecv 44 / 40 = 1.1 ≤ 1.2; hier has no
	// sendrecv.
	want := []RawLatency{
		{Comm: "hier", Op: "allreduce", Bytes: 8, US: 150, RTTUS: 40, Ratio: 3.75, Goal: 2.5},
		{Comm: "flat", Op: "allreduce", Bytes: 8, US: 75, RTTUS: 40, Ratio: 1.875, Goal: 2.5},
		{Comm: "flat", Op: "sendrecv", Bytes: 8, US: 44, RTTUS: 40, Ratio: 1.1, Goal: 1.2},
	}
	if len(s.Raw) != len(want) {
		t.Fatalf("raw latency: %+v, want %+v", s.Raw, want)
	}
	for i, w := range want {
		g := s.Raw[i]
		if g.Comm != w.Comm || g.Op != w.Op || g.Bytes != w.Bytes || g.US != w.US || math.Abs(g.Ratio-w.Ratio) > 1e-12 || g.Goal != w.Goal {
			t.Errorf("raw latency %d: %+v, want %+v", i, g, w)
		}
	}
	var b bytes.Buffer
	if err := s.Format(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"allreduce at 8 B on hier / the bare transport's round trip = 150.00 / 40.00 us = 3.75 (goal ≤ 2.5)  not met\n",
		"allreduce at 8 B on flat / the bare transport's round trip = 75.00 / 40.00 us = 1.88 (goal ≤ 2.5)  met\n",
		"sendrecv at 8 B on flat / the bare transport's round trip = 44.00 / 40.00 us = 1.10 (goal ≤ 1.2)  met\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("Format output lacks %q:\n%s", want, b.String())
		}
	}
	if g := RawGoal("allreduce", 2); g != 1.5 {
		t.Errorf("2 ranks: goal %v, want 1.5", g)
	}
	// With the bare doubling exchange measured, each AllReduce is also
	// judged against it, and each sendrecv against one of its 2 rounds.
	res.RawDoublingUS = 100
	s = Summarize(res)
	var dbl []RawLatency
	for _, l := range s.Raw {
		if l.Doubling {
			dbl = append(dbl, l)
		}
	}
	if len(dbl) != 3 || dbl[0].Comm != "hier" || dbl[0].Ratio != 1.5 || dbl[1].Ratio != 0.75 || dbl[0].Goal != DoublingGoal ||
		dbl[0].PerRound || dbl[2].Op != "sendrecv" || !dbl[2].PerRound || dbl[2].RTTUS != 50 || dbl[2].Ratio != 0.88 {
		t.Errorf("doubling lines: %+v", dbl)
	}
	b.Reset()
	if err := s.Format(&b); err != nil ||
		!strings.Contains(b.String(), "allreduce at 8 B on flat / a bare doubling exchange among all 4 ranks = 75.00 / 100.00 us = 0.75 (goal ≤ 1.2)  met\n") ||
		!strings.Contains(b.String(), "sendrecv at 8 B on flat / one round of a bare doubling exchange among all 4 ranks = 44.00 / 50.00 us = 0.88 (goal ≤ 1.2)  met\n") {
		t.Errorf("doubling line missing: %v\n%s", err, b.String())
	}
	res.RawDoublingUS = 0
	res.RawRTTUS = 0
	b.Reset()
	if err := Summarize(res).Format(&b); err != nil || strings.Contains(b.String(), "raw latency") {
		t.Errorf("no round trip measured: %v\n%s", err, b.String())
	}
}

// TestSummaryFloor: with the machine's floor measured (plain sockets), the
// small calls are judged against it instead of nexar's frames, and a line
// sets nexar's frames (ours) beside it.
func TestSummaryFloor(t *testing.T) {
	res := Result{Ranks: 4, RawRTTUS: 40, RawDoublingUS: 100, FloorRTTUS: 20, FloorDoublingUS: 80, Comms: []string{"flat"}}
	res.Rows = []Row{
		{Op: "allreduce", Comm: "flat", Bytes: 8, Timing: Timing{TimeUS: 60}},
		{Op: "sendrecv", Comm: "flat", Bytes: 8, Timing: Timing{TimeUS: 44}},
	}
	s := Summarize(res)
	// allreduce 60/20 = 3 (> 2.5), sendrecv 44/20 = 2.2 (> 1.2); against
	// the doubling exchange 60/80 = 0.75, and one of its 2 rounds 44/40 = 1.1.
	want := []RawLatency{
		{Op: "allreduce", RTTUS: 20, Ratio: 3, Goal: 2.5},
		{Op: "sendrecv", RTTUS: 20, Ratio: 2.2, Goal: 1.2},
		{Op: "allreduce", RTTUS: 80, Ratio: 0.75, Goal: DoublingGoal, Doubling: true},
		{Op: "sendrecv", RTTUS: 40, Ratio: 1.1, Goal: DoublingGoal, Doubling: true, PerRound: true},
	}
	if len(s.Raw) != len(want) {
		t.Fatalf("raw latency: %+v, want %+v", s.Raw, want)
	}
	for i, w := range want {
		g := s.Raw[i]
		if g.Op != w.Op || g.RTTUS != w.RTTUS || math.Abs(g.Ratio-w.Ratio) > 1e-12 || g.Goal != w.Goal || !g.Floor ||
			g.Doubling != w.Doubling || g.PerRound != w.PerRound {
			t.Errorf("raw latency %d: %+v, want %+v with Floor", i, g, w)
		}
	}
	if !s.HasFrames || s.FramesRTTUS != 40 || s.FloorRTTUS != 20 || s.FramesDoublingUS != 100 || s.FloorDoublingUS != 80 {
		t.Errorf("frames against the floor: %+v", s)
	}
	var b bytes.Buffer
	if err := s.Format(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"#   raw latency: allreduce at 8 B on flat / the floor's round trip (raw sockets) = 60.00 / 20.00 us = 3.00 (goal ≤ 2.5)  not met\n",
		"#   raw latency: sendrecv at 8 B on flat / the floor's round trip (raw sockets) = 44.00 / 20.00 us = 2.20 (goal ≤ 1.2)  not met\n",
		"#   raw latency: allreduce at 8 B on flat / a raw-socket doubling exchange among all 4 ranks = 60.00 / 80.00 us = 0.75 (goal ≤ 1.2)  met\n",
		"#   raw latency: sendrecv at 8 B on flat / one round of a raw-socket doubling exchange among all 4 ranks = 44.00 / 40.00 us = 1.10 (goal ≤ 1.2)  met\n",
		"#   ours: nexar's frames' round trip / the floor's = 40.00 / 20.00 us = 2.00; their doubling exchange among all 4 ranks / the floor's = 100.00 / 80.00 us = 1.25\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("Format output lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "bare") {
		t.Errorf("judged against nexar's frames with the floor measured:\n%s", b.String())
	}

	// The floor's round trip alone: no doubling lines, and the frames'
	// line without its doubling part.
	res.FloorDoublingUS = 0
	s = Summarize(res)
	b.Reset()
	s.Format(&b)
	if len(s.Raw) != 2 || !strings.Contains(b.String(), "= 2.00\n") || strings.Contains(b.String(), "doubling") {
		t.Errorf("floor without its doubling exchange: %+v\n%s", s.Raw, b.String())
	}
	// Nexar's frames alone: judged against them, as before the floor.
	res.FloorRTTUS = 0
	s = Summarize(res)
	if s.HasFrames || len(s.Raw) != 4 || s.Raw[0].Floor || s.Raw[0].RTTUS != 40 {
		t.Errorf("without the floor: %+v", s)
	}
}

// TestRatioSide: a ratio beside a goal is written with the digits it takes
// to read on the side of the goal its verdict says.
func TestRatioSide(t *testing.T) {
	for _, tc := range []struct {
		v, goal float64
		atLeast bool
		want    string
	}{
		{1.4996, 1.5, true, "1.4996"}, {1.5, 1.5, true, "1.50"}, {1.504, 1.5, true, "1.50"}, {2.26, 1.5, true, "2.26"},
		{2.5004, 2.5, false, "2.5004"}, {2.4996, 2.5, false, "2.50"}, {0.53, 1.2, false, "0.53"}, {1.2000001, 1.2, false, "1.200000"},
	} {
		if got := goalRatio(tc.v, tc.goal, tc.atLeast); got != tc.want {
			t.Errorf("goalRatio(%v, %v, %v) = %q, want %q", tc.v, tc.goal, tc.atLeast, got, tc.want)
		}
	}
	g := formatGoalsString(t, []Goal{{What: "allreduce busbw hier/flat", From: 4 << 20, To: 64 << 20, Want: 1.5, Sizes: 5, Worst: 1.4996, WorstAt: 8 << 20, Median: 2.04, Measured: true}})
	if !strings.Contains(g, "worst 1.4996x at 8M, median 2.04x over 5 sizes  not met\n") {
		t.Errorf("FormatGoals:\n%s", g)
	}
}

func formatGoalsString(t *testing.T, goals []Goal) string {
	t.Helper()
	var b strings.Builder
	if err := FormatGoals(&b, goals); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
