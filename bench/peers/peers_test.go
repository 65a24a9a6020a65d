package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The testdata are real runs of run.sh -quick (2 cores, a loaded machine):
// testdata/CONFIG/openmpi-N.csv is coll's output under mpirun, two sweeps
// appended (8–512 B, 1–64 MiB), and hiercomm-N.csv hiercomm-bench's -csv
// files of the same sweeps.

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func readTestdata(t *testing.T, path string) []Sample {
	t.Helper()
	s, err := readCSV(filepath.Join("testdata", path))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestParseCSV reads both sides' files: the columns by the header's names,
// the second sweep's header and coll's "#" lines skipped, hiercomm's empty
// wrong column (not checked) as 0.
func TestParseCSV(t *testing.T) {
	for _, tc := range []struct {
		path  string
		first Sample
		last  Sample
	}{
		{"tcp4/openmpi-1.csv", Sample{"allreduce", 8, 91.366, 0}, Sample{"broadcast", 64 << 20, 112245.294, 0}},
		{"tcp4/hiercomm-1.csv", Sample{"allreduce", 8, 155.40465248226948, 0}, Sample{}},
	} {
		s := readTestdata(t, tc.path)
		// allreduce and broadcast at 8, 64 and 512 B, reducescatter at 64
		// and 512 (8 B is under one float per rank), each at 1, 8, 64 MiB.
		if len(s) != 17 {
			t.Errorf("%s: %d rows, want 17: %+v", tc.path, len(s), s)
			continue
		}
		if s[0] != tc.first {
			t.Errorf("%s: first row %+v, want %+v", tc.path, s[0], tc.first)
		}
		if tc.last.Op != "" && s[16] != tc.last {
			t.Errorf("%s: last row %+v, want %+v", tc.path, s[16], tc.last)
		}
	}
	s, err := ParseCSV(strings.NewReader("op,size_bytes,time_us,wrong\nallreduce,8,1.5,3\n"))
	if err != nil || len(s) != 1 || s[0] != (Sample{"allreduce", 8, 1.5, 3}) {
		t.Errorf("wrong column: %+v, %v", s, err)
	}
}

func TestParseCSVErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"empty", "", "no header"},
		{"comments only", "# Open MPI\n", "no header"},
		{"row first", "allreduce,8,2,1.0\nop,size_bytes,time_us\n", "a row before the header"},
		{"no size", "op,count,time_us\nallreduce,2,1.0\n", "no size_bytes column"},
		{"bad size", "op,size_bytes,time_us\nallreduce,8B,1.0\n", "size_bytes"},
		{"no time", "op,size_bytes,time_us\nallreduce,8,\n", "not a positive time"},
		{"zero time", "op,size_bytes,time_us\nallreduce,8,0\n", "not a positive time"},
		{"bad wrong", "op,size_bytes,time_us,wrong\nallreduce,8,1,x\n", "wrong"},
	} {
		if _, err := ParseCSV(strings.NewReader(tc.text)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func TestMedian(t *testing.T) {
	if m := Median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("odd: %v", m)
	}
	if m := Median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("even: %v", m)
	}
	if m := Median(nil); !math.IsNaN(m) {
		t.Errorf("none: %v", m)
	}
	v := []float64{3, 1, 2}
	Median(v)
	if v[0] != 3 {
		t.Error("Median sorted its argument")
	}
}

// TestCompare pairs the testdata's rounds: medians per side, the ratio of
// the medians, the rounds' own ratios, and each line's goal.
func TestCompare(t *testing.T) {
	lines, err := readConfig("testdata", "tcp4")
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 17 {
		t.Fatalf("%d lines, want 17", len(lines))
	}
	// allreduce 8 B: hiercomm 155.40, 146.95, 153.97 µs; OpenMPI 91.366,
	// 237.237, 196.591.
	l := lines[0]
	want := Line{Config: "tcp4", Op: "allreduce", Bytes: 8, RefUS: 196.591, OursUS: 153.96864220183485, Rounds: 3, Goal: 0,
		Low: 146.94537037037037 / 237.237, High: 155.40465248226948 / 91.366}
	want.Ratio = want.OursUS / want.RefUS
	if l.Config != want.Config || l.Op != want.Op || l.Bytes != want.Bytes || !near(l.RefUS, want.RefUS) || !near(l.OursUS, want.OursUS) ||
		!near(l.Ratio, want.Ratio) || !near(l.Low, want.Low) || !near(l.High, want.High) || l.Rounds != 3 || l.Goal != 0 || !l.Met() {
		t.Errorf("allreduce 8 B: %+v, want %+v (met)", l, want)
	}
	goals := map[[2]string]int{}
	for _, l := range lines {
		goals[[2]string{l.Op, FormatSize(l.Bytes)}] = l.Goal
	}
	for k, g := range map[[2]string]int{
		{"allreduce", "8 B"}: 0, {"allreduce", "64 B"}: -1, {"broadcast", "8 B"}: -1, {"reducescatter", "512 B"}: -1,
		{"allreduce", "1 MiB"}: 1, {"reducescatter", "64 MiB"}: 1, {"broadcast", "8 MiB"}: 1,
	} {
		if goals[k] != g {
			t.Errorf("%v: goal %d, want %d", k, goals[k], g)
		}
	}
	shm, err := readConfig("testdata", "shm4")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range shm {
		if l.Goal != 2 {
			t.Errorf("shm4 %s %d: goal %d, want 2 (every op and size)", l.Op, l.Bytes, l.Goal)
		}
	}
}

// TestCompareMissing: a size one side lacks in a round is left out of that
// round; a size never on both sides has no line; extra rounds of one side
// are ignored.
func TestCompareMissing(t *testing.T) {
	mpi := [][]Sample{{{"allreduce", 8, 10, 0}, {"allreduce", 64, 10, 0}}, {{"allreduce", 8, 20, 0}}, {{"allreduce", 8, 30, 0}}}
	ours := [][]Sample{{{"allreduce", 8, 20, 0}, {"broadcast", 8, 1, 0}}, {{"allreduce", 8, 20, 2}, {"allreduce", 64, 5, 0}}}
	lines := Compare("tcp2", mpi, ours)
	if len(lines) != 1 {
		t.Fatalf("lines %+v, want allreduce 8 B only", lines)
	}
	l := lines[0]
	if l.Rounds != 2 || l.RefUS != 15 || l.OursUS != 20 || l.Low != 1 || l.High != 2 || l.Wrong != 2 || l.Goal != 0 || l.Met() {
		t.Errorf("%+v", l)
	}
}

// TestJudgeAndMarkdown: the testdata's verdicts, and the markdown that
// run.sh prints (the tables and the goals).
func TestJudgeAndMarkdown(t *testing.T) {
	var lines []Line
	for _, c := range []string{"tcp4", "shm4"} {
		l, err := readConfig("testdata", c)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l...)
	}
	v := Judge(lines)
	if len(v) != 4 {
		t.Fatalf("%d verdicts", len(v))
	}
	// tcp4: allreduce 8 B met (0.78×); of the 9 large sizes only
	// broadcast 64 MiB is over (1.13×). shm4: broadcast 8 and 64 B and
	// allreduce 8 B over.
	if v[0].Lines != 1 || !v[0].AllMet() {
		t.Errorf("goal 1: %+v", v[0])
	}
	if v[1].Lines != 9 || v[1].Met != 8 || v[1].AllMet() || v[1].Worst.Op != "broadcast" || v[1].Worst.Bytes != 64<<20 {
		t.Errorf("goal 2: %+v", v[1])
	}
	if v[2].Lines != 17 || v[2].Met != 14 || v[2].Worst.Op != "broadcast" || v[2].Worst.Bytes != 8 {
		t.Errorf("goal 3: %+v", v[2])
	}
	var b bytes.Buffer
	floors := []Floor{{Config: "tcp4", RTTUS: 15.49, StreamGBs: 4.2, Runs: 3}, {Config: "shm4", RTTUS: 15, StreamGBs: 4, Runs: 3}}
	if err := Markdown(&b, "2026-11-28, 2 cores", lines, floors); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Measured 2026-11-28, 2 cores.\n",
		"**TCP loopback, 4 ranks** (3 rounds)\n\n| size | allreduce | reducescatter | broadcast |\n|---:|---|---|---|\n",
		"| 8 B | 0.78× ✓ 154 / 197 [0.62–1.70] | | 1.18× 18.0 / 15.2 [0.69–1.83] |\n",
		"| 64 MiB | 0.45× ✓ 228518 / 512529 [0.32–0.79] | 0.33× ✓ 107948 / 330072 [0.26–0.52] | 1.13× ✗ 126462 / 112245 [0.88–1.13] |\n",
		"**shared memory, 4 ranks on one node (OpenMPI's vader)** (3 rounds)",
		"| 8 B | 1.15× ✗ 10.3 / 9.02 [0.88–1.15] | | 13.24× ✗ 6.82 / 0.52 [11.44–25.92] |\n",
		"\nThe machine's floor in the same rounds (hiercomm-bench's plain TCP sockets between two of its processes, blocking write(2) and read(2), no frames; the median of 3 runs): an 8-byte round trip takes 15.5 µs, and one way they move 4.20 GB/s, so 1 MiB takes 250 µs from one process to the other at best.\n\n**shared memory",
		"- **met**: AllReduce at 8 B, TCP loopback, 2 and 4 ranks ≤ 1.0×: 1 of 1 met; the worst 0.78× (allreduce at 8 B, TCP loopback, 4 ranks)\n",
		"- **not met**: AllReduce, ReduceScatter and Broadcast from 512 KiB to 64 MiB, TCP loopback ≤ 1.0×: 8 of 9 met; the worst 1.13× (broadcast at 64 MiB, TCP loopback, 4 ranks)\n",
		"- **not met**: shared memory, 4 ranks, every op and size ≤ 1.0×: 14 of 17 met; the worst 13.24× (broadcast at 8 B, shared memory, 4 ranks on one node (OpenMPI's vader))\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "The machine's floor"); n != 1 {
		t.Errorf("%d floor lines; want the TCP table's alone:\n%s", n, out)
	}
	if strings.Contains(out, "wrong") {
		t.Errorf("wrong elements reported where every check passed:\n%s", out)
	}
	// A goal no line falls under says so.
	b.Reset()
	Markdown(&b, "", lines[:1], nil)
	if !strings.Contains(b.String(), "- shared memory, 4 ranks, every op and size ≤ 1.0×: not measured\n") {
		t.Errorf("unmeasured goal:\n%s", b.String())
	}
}

// TestEncryptedAgainstTCP: quic4 reads its reference from tcp-N.csv (plain
// TCP in the same rounds), its sizes from 1 MiB fall under the encrypted
// goal (time ≤ 1.25×, busbw ≥ 0.8×) and the smaller ones under none, and
// its table names the reference.
func TestEncryptedAgainstTCP(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "quic4"), 0o755)
	for n, rows := range map[string]string{
		"tcp-1.csv":      "allreduce,524288,100\nallreduce,1048576,1000\nbroadcast,4194304,2000\n",
		"hiercomm-1.csv": "allreduce,524288,500\nallreduce,1048576,1200\nbroadcast,4194304,3000\n",
		"tcp-2.csv":      "allreduce,524288,100\nallreduce,1048576,1000\nbroadcast,4194304,2000\n",
		"hiercomm-2.csv": "allreduce,524288,500\nallreduce,1048576,1300\nbroadcast,4194304,2600\n",
	} {
		os.WriteFile(filepath.Join(dir, "quic4", n), []byte("op,size_bytes,time_us\n"+rows), 0o644)
	}
	lines, err := readConfig(dir, "quic4")
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3: %+v", len(lines), lines)
	}
	// 512 KiB is under the goal's sizes; 1 MiB at 1.25× meets it, 4 MiB
	// at 1.40× does not.
	for i, want := range []struct {
		goal  int
		ratio float64
		met   bool
	}{{-1, 5, false}, {3, 1.25, true}, {3, 1.4, false}} {
		if l := lines[i]; l.Goal != want.goal || !near(l.Ratio, want.ratio) || l.Met() != want.met {
			t.Errorf("line %d: %+v, want goal %d, ratio %v, met %v", i, l, want.goal, want.ratio, want.met)
		}
	}
	var b bytes.Buffer
	if err := Markdown(&b, "", lines, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"**the default network (QUIC and its TLS lane, encrypted), 4 ranks over loopback** (2 rounds; against hiercomm over plain TCP)\n",
		"| 1 MiB | 1.25× ✓ 1250 / 1000 [1.20–1.30] |",
		"- **not met**: the encrypted default network from 1 MiB, 4 ranks, against plain TCP (busbw ≥ 0.8× plain TCP's) ≤ 1.25×: 1 of 2 met; the worst 1.40× (broadcast at 4 MiB, the default network",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, b.String())
		}
	}
	os.Remove(filepath.Join(dir, "quic4", "tcp-2.csv"))
	if _, err := readConfig(dir, "quic4"); err == nil || !strings.Contains(err.Error(), "tcp-2.csv") {
		t.Errorf("a round without plain TCP's file: %v", err)
	}
}

func TestReadConfigErrors(t *testing.T) {
	if _, err := readConfig("testdata", "tcp2"); err == nil || !strings.Contains(err.Error(), "no rounds") {
		t.Errorf("no files: %v", err)
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "tcp4"), 0o755)
	os.WriteFile(filepath.Join(dir, "tcp4", "openmpi-1.csv"), []byte("op,size_bytes,time_us\nallreduce,8,1\n"), 0o644)
	if _, err := readConfig(dir, "tcp4"); err == nil || !strings.Contains(err.Error(), "hiercomm-1.csv") {
		t.Errorf("a round without hiercomm's file: %v", err)
	}
}

func TestFormatSize(t *testing.T) {
	for b, want := range map[int64]string{8: "8 B", 1000: "1000 B", 512 << 10: "512 KiB", 64 << 20: "64 MiB", 3 << 19: "1536 KiB"} {
		if got := FormatSize(b); got != want {
			t.Errorf("%d: %q, want %q", b, got, want)
		}
	}
}

// TestReadFloor: the floor is the median of the runs whose JSON has it; a
// run without it (shared memory alone) counts for nothing; a file that is
// not JSON is an error that names it.
func TestReadFloor(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "tcp2"), 0o755)
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, "tcp2", name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("hiercomm-1-1.json", `{"ceilings":{"raw_socket":{"rtt_us":10,"stream_gbs":4}}}`)
	write("hiercomm-2-1.json", `{"ceilings":{"raw_socket":{"rtt_us":30,"stream_gbs":2}}}`)
	write("hiercomm-3-1.json", `{"ceilings":{"raw_socket":{"rtt_us":20,"stream_gbs":3}}}`)
	write("hiercomm-4-1.json", `{"ceilings":{}}`)
	f, err := readFloor(dir, "tcp2")
	if err != nil || f != (Floor{Config: "tcp2", RTTUS: 20, StreamGBs: 3, Runs: 3}) {
		t.Fatalf("floor %+v, %v", f, err)
	}
	if f, err := readFloor(dir, "tcp4"); err != nil || f.Runs != 0 {
		t.Errorf("no runs: %+v, %v", f, err)
	}
	write("hiercomm-5-1.json", `not json`)
	if _, err := readFloor(dir, "tcp2"); err == nil || !strings.Contains(err.Error(), "hiercomm-5-1.json") {
		t.Errorf("a file that is not JSON: %v", err)
	}
}
