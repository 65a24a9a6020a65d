package bench

import (
	"bytes"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// tableResult is a made-up run with values of every magnitude: both forms,
// an op without an in-place form, an unchecked row and a wrong one.
func tableResult(comms []string) Result {
	s, err := Spec{Ops: []string{"allreduce", "broadcast"}, MinBytes: 8, MaxBytes: 128 << 20, Warmup: 1, Repeats: 3, Budget: 30e6, Check: true, InPlace: true}.withDefaults(4)
	if err != nil {
		panic(err)
	}
	res := Result{Ranks: 4, Spec: s, Comms: comms}
	names := comms
	if len(names) == 0 {
		names = []string{""}
	}
	for i, c := range names {
		k := float64(i + 1)
		res.Rows = append(res.Rows,
			Row{Op: "allreduce", Comm: c, Bytes: 8, Count: 2, DType: comm.F32, RedOp: comm.Sum, Root: -1,
				Timing:  Timing{TimeUS: 12.345 * k, AlgBW: 0.00065, BusBW: 0.00097, Wrong: 0},
				InPlace: &Timing{TimeUS: 11.9 * k, AlgBW: 0.00067, BusBW: 0.00101, Wrong: 0}},
			Row{Op: "allreduce", Comm: c, Bytes: 134217728, Count: 33554432, DType: comm.F32, RedOp: comm.Sum, Root: -1,
				Timing:  Timing{TimeUS: 1234567.8 * k, AlgBW: 0.1087, BusBW: 0.1631, Wrong: 3},
				InPlace: &Timing{TimeUS: 123456.7 * k, AlgBW: 1.0872, BusBW: 1.6308, Wrong: 0}},
		)
	}
	for _, c := range names {
		res.Rows = append(res.Rows, Row{Op: "broadcast", Comm: c, Bytes: 1024, Count: 128, DType: comm.F64, Root: 2,
			Timing: Timing{TimeUS: 234.56, AlgBW: 4.3656, BusBW: 4.3656, Wrong: -1}})
	}
	return res
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := "testdata/" + name
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -run %s -update rewrites it):\n%s\nwant:\n%s", path, t.Name(), got, want)
	}
}

func TestFormatGolden(t *testing.T) {
	for _, tc := range []struct {
		file  string
		comms []string
	}{{"table.golden", nil}, {"table-compare.golden", []string{"hier", "flat"}}} {
		var b bytes.Buffer
		res := tableResult(tc.comms)
		if err := res.Format(&b); err != nil {
			t.Fatal(err)
		}
		golden(t, tc.file, b.String())
	}
}

// columnHeader returns the three heading lines of an nccl-tests table
// (the one naming the out-of-place and in-place groups, and the two after).
func columnHeader(t *testing.T, text string) []string {
	t.Helper()
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if strings.Contains(l, "out-of-place") && i+2 < len(lines) {
			return lines[i : i+3]
		}
	}
	t.Fatalf("no column heading in:\n%s", text)
	return nil
}

// fieldEnds are the offsets at which each space-separated field of line ends.
func fieldEnds(line string) []int {
	var ends []int
	for i := range len(line) {
		if line[i] != ' ' && (i+1 == len(line) || line[i+1] == ' ') {
			ends = append(ends, i+1)
		}
	}
	return ends
}

// TestLayoutMatchesNCCLTests holds our table against a stored output of
// nccl-tests' all_reduce_perf (testdata/nccl-tests-all_reduce_perf.txt):
// the same heading lines byte for byte, every row's 13 columns ending at
// the same offsets, and the same footer lines, so what parses one parses
// the other.
func TestLayoutMatchesNCCLTests(t *testing.T) {
	ref, err := os.ReadFile("testdata/nccl-tests-all_reduce_perf.txt")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := tableResult(nil).Format(&b); err != nil {
		t.Fatal(err)
	}
	ours := b.String()
	refHead, ourHead := columnHeader(t, string(ref)), columnHeader(t, ours)
	for i := range refHead {
		if refHead[i] != ourHead[i] {
			t.Errorf("heading line %d:\n%q\nnccl-tests:\n%q", i, ourHead[i], refHead[i])
		}
	}
	rows := func(text string) [][]int {
		var out [][]int
		for _, l := range strings.Split(text, "\n") {
			if l != "" && !strings.HasPrefix(l, "#") {
				out = append(out, fieldEnds(l))
			}
		}
		return out
	}
	refRows, ourRows := rows(string(ref)), rows(ours)
	if len(refRows) == 0 || len(ourRows) == 0 {
		t.Fatalf("%d reference rows, %d of ours", len(refRows), len(ourRows))
	}
	want := refRows[0]
	if len(want) != 13 {
		t.Fatalf("reference row has %d columns, want 13", len(want))
	}
	for i, r := range refRows {
		if !equalInts(r, want) {
			t.Fatalf("reference row %d ends its columns at %v, row 0 at %v", i, r, want)
		}
	}
	for i, r := range ourRows {
		if !equalInts(r, want) {
			t.Errorf("our row %d ends its columns at %v, nccl-tests at %v", i, r, want)
		}
	}
	for _, re := range []string{
		`(?m)^# Out of bounds values : \d+ (OK|FAILED)$`,
		`(?m)^# Avg bus bandwidth    : [0-9.e+-]+ $`,
		`(?m)^# Collective test starting: all_reduce_perf$`,
		`(?m)^# Collective test concluded: all_reduce_perf$`,
		`(?m)^# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2\(factor\) warmup iters: \d+ iters: \w+ agg iters: 1 validation: 1 graph: 0`,
	} {
		rx := regexp.MustCompile(re)
		if !rx.MatchString(string(ref)) {
			t.Errorf("the reference lacks %s", re)
		}
		if !rx.MatchString(ours) {
			t.Errorf("our table lacks %s:\n%s", re, ours)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestTableWriterStreams: each row is written when it is given, and the
// footer when the operation changes or at Close.
func TestTableWriterStreams(t *testing.T) {
	res := tableResult(nil)
	var b bytes.Buffer
	tw := NewTableWriter(&b, res.Ranks, res.Spec, nil)
	if err := tw.Row(res.Rows[0]); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(b.String(), res.Rows[0].line()+"\n") || strings.Contains(b.String(), "Avg bus bandwidth") || !tw.Open() {
		t.Fatalf("after one row:\n%s", b.String())
	}
	tw.Row(res.Rows[1])
	tw.Row(res.Rows[2]) // broadcast: closes allreduce's table
	if strings.Count(b.String(), "Avg bus bandwidth") != 1 || !strings.Contains(b.String(), "# Out of bounds values : 3 FAILED") {
		t.Fatalf("after the second op's first row:\n%s", b.String())
	}
	// The mean over both forms of both rows, as nccl-tests averages.
	if want := "# Avg bus bandwidth    : " + cFloat((0.00097+0.00101+0.1631+1.6308)/4) + " \n"; !strings.Contains(b.String(), want) {
		t.Errorf("lacks %q:\n%s", want, b.String())
	}
	if err := tw.Close(); err != nil || tw.Open() || strings.Count(b.String(), "Avg bus bandwidth") != 2 || !strings.Contains(b.String(), "N/A (not checked)") {
		t.Errorf("after Close (%v):\n%s", err, b.String())
	}
}
