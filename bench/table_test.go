package bench

import (
	"bytes"
	"flag"
	"os"
	"regexp"
	"slices"
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
				Timing:  Timing{Iters: 2000, TimeUS: 12.345 * k, AlgBW: 0.00065, BusBW: 0.00097, Wrong: 0},
				InPlace: &Timing{Iters: 2100, TimeUS: 11.9 * k, AlgBW: 0.00067, BusBW: 0.00101, Wrong: 0}},
			Row{Op: "allreduce", Comm: c, Bytes: 4096, Count: 1024, DType: comm.F32, RedOp: comm.Sum, Root: -1,
				Timing:  Timing{Iters: 1500, TimeUS: 360.2 * k, AlgBW: 0.0114, BusBW: 0.0171, Wrong: 0},
				InPlace: &Timing{Iters: 1500, TimeUS: 735.1 * k, AlgBW: 0.00557, BusBW: 0.00836, Wrong: 0}},
			Row{Op: "allreduce", Comm: c, Bytes: 134217728, Count: 33554432, DType: comm.F32, RedOp: comm.Sum, Root: -1,
				Timing:  Timing{Iters: 1, TimeUS: 1234567.8 * k, AlgBW: 0.1087, BusBW: 0.1631, Wrong: 3},
				InPlace: &Timing{Iters: 1, TimeUS: 123456.7 * k, AlgBW: 1.0872, BusBW: 1.6308, Wrong: 0}},
		)
	}
	for _, c := range names {
		res.Rows = append(res.Rows, Row{Op: "broadcast", Comm: c, Bytes: 1024, Count: 128, DType: comm.F64, Root: 2,
			Timing: Timing{Iters: 128, TimeUS: 234.56, AlgBW: 4.3656, BusBW: 4.3656, Wrong: -1}})
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

// columnHeader returns the three heading lines of each nccl-tests table
// in text (the one naming the out-of-place and in-place groups, and the
// two after).
func columnHeader(t *testing.T, text string) [][]string {
	t.Helper()
	var out [][]string
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if strings.Contains(l, "out-of-place") && i+2 < len(lines) {
			out = append(out, lines[i:i+3])
		}
	}
	if len(out) == 0 {
		t.Fatalf("no column heading in:\n%s", text)
	}
	return out
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

// dataRows are text's table rows: the lines that are neither empty nor
// comments.
func dataRows(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// TestLayoutMatchesNCCLTests is the golden test of the table layout: it
// holds every table we print, for one communicator and for two compared,
// against a stored output of nccl-tests' all_reduce_perf
// (testdata/nccl-tests-all_reduce_perf.txt). The column headings are
// nccl-tests' byte for byte, so the columns are the same 13 in the same
// order (size count type redop root, then time algbw busbw #wrong out of
// place and in place) at the same widths; every data row is as long as
// nccl-tests' and ends each of its 13 columns at the same offset (each
// value right-aligned in its column, none overflowing into the next); and
// each table has nccl-tests' header and footer lines, once.
func TestLayoutMatchesNCCLTests(t *testing.T) {
	ref, err := os.ReadFile("testdata/nccl-tests-all_reduce_perf.txt")
	if err != nil {
		t.Fatal(err)
	}
	refHeads := columnHeader(t, string(ref))
	refHead := refHeads[0]
	wantNames := []string{"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"}
	if got := strings.Fields(strings.TrimPrefix(refHead[1], "#")); !slices.Equal(got, wantNames) {
		t.Fatalf("the reference's columns are %q, want %q", got, wantNames)
	}
	refRows := dataRows(string(ref))
	if len(refRows) == 0 {
		t.Fatal("no rows in the reference")
	}
	want, wantLen := fieldEnds(refRows[0]), len(refRows[0])
	if len(want) != len(wantNames) {
		t.Fatalf("the reference's row has %d columns, want %d", len(want), len(wantNames))
	}
	for i, r := range refRows {
		if !slices.Equal(fieldEnds(r), want) || len(r) != wantLen {
			t.Fatalf("reference row %d ends its columns at %v, row 0 at %v", i, fieldEnds(r), want)
		}
	}
	// Each heading ends at its column's end, as the rows do.
	if got := fieldEnds(refHead[1])[1:]; !slices.Equal(got, want) {
		t.Fatalf("the reference's headings end at %v, its rows' columns at %v", got, want)
	}

	for _, comms := range [][]string{nil, {"hier", "flat"}} {
		var b bytes.Buffer
		res := tableResult(comms)
		if err := res.Format(&b); err != nil {
			t.Fatal(err)
		}
		ours := b.String()
		tables := strings.Split(ours, "# Collective test starting: ")[1:]
		if wantTables := 2 * max(len(comms), 1); len(tables) != wantTables {
			t.Fatalf("%v: %d tables, want %d (one per operation and communicator):\n%s", comms, len(tables), wantTables, ours)
		}
		for _, head := range columnHeader(t, ours) {
			for i := range refHead {
				if head[i] != refHead[i] {
					t.Errorf("%v: heading line %d:\n%q\nnccl-tests:\n%q", comms, i, head[i], refHead[i])
				}
			}
		}
		rows := dataRows(ours)
		if len(rows) != len(res.Rows) {
			t.Errorf("%v: %d rows printed, want %d", comms, len(rows), len(res.Rows))
		}
		for i, r := range rows {
			if got := fieldEnds(r); !slices.Equal(got, want) || len(r) != wantLen {
				t.Errorf("%v: our row %d ends its columns at %v (length %d), nccl-tests at %v (length %d):\n%s\n%s", comms, i, got, len(r), want, wantLen, r, refRows[0])
			}
		}
		for _, tab := range tables {
			tab = "# Collective test starting: " + tab
			for _, re := range []string{
				`(?m)^# Out of bounds values : (\d+ (OK|FAILED)|N/A \(not checked\))$`,
				`(?m)^# Avg bus bandwidth    : [0-9.e+-]+ $`,
				`(?m)^# Collective test starting: \w+$`,
				`(?m)^# Collective test concluded: \w+$`,
				`(?m)^# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2\(factor\) warmup iters: \d+ iters: \d+(-\d+)? agg iters: 1 validation: 1 graph: 0`,
			} {
				rx := regexp.MustCompile(re)
				if !rx.MatchString(string(ref)) && !strings.Contains(re, "N/A") {
					t.Errorf("the reference lacks %s", re)
				}
				if n := len(rx.FindAllString(tab, -1)); n != 1 {
					t.Errorf("%v: %d lines match %s in one table, want 1:\n%s", comms, n, re, tab)
				}
			}
		}
	}
}

// TestTablePerCommunicator: compared communicators get a table each, in
// the order given, headed by their name, with their own footer; no row
// names its communicator.
func TestTablePerCommunicator(t *testing.T) {
	var b bytes.Buffer
	if err := tableResult([]string{"hier", "flat"}).Format(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	heads := regexp.MustCompile(`(?m)^# Communicator (\w+)\n# Collective test starting: (\w+)$`).FindAllStringSubmatch(out, -1)
	var got []string
	for _, h := range heads {
		got = append(got, h[1]+" "+h[2])
	}
	if want := []string{"hier all_reduce_perf", "flat all_reduce_perf", "hier broadcast_perf", "flat broadcast_perf"}; !slices.Equal(got, want) {
		t.Errorf("tables %q, want %q:\n%s", got, want, out)
	}
	if strings.Contains(out, "  hier\n") || strings.Contains(out, "  flat\n") || strings.Contains(out, " comm\n") {
		t.Errorf("a row or heading names its communicator:\n%s", out)
	}
	// flat's rows are twice as slow: its average is its own.
	if !strings.Contains(out, "this table: flat\n") || strings.Count(out, "# Avg bus bandwidth") != 4 {
		t.Errorf("want 4 footers and a line saying which table is flat's:\n%s", out)
	}
}

// TestIterationsInHeader: the settings line gives the iterations each
// repeat timed: one number when every row timed the same, else the range
// and, per size, the count (out of place/in place where they differ).
func TestIterationsInHeader(t *testing.T) {
	var b bytes.Buffer
	if err := tableResult(nil).Format(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		" warmup iters: 1 iters: 1-2100 agg iters: 1 ",
		"iterations per repeat chosen to last 30ms (1-2100)",
		"#   8:2000/2100 4K:1500 128M:1\n",
		" warmup iters: 1 iters: 128 agg iters: 1 ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "auto") {
		t.Errorf("says auto:\n%s", out)
	}
	res := tableResult(nil)
	res.Spec.Iters = 20
	for i := range res.Rows {
		res.Rows[i].Iters = 20
		if res.Rows[i].InPlace != nil {
			res.Rows[i].InPlace.Iters = 20
		}
	}
	b.Reset()
	if err := res.Format(&b); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, " iters: 20 agg") || !strings.Contains(out, "time per iteration: 20 iterations per repeat,") || strings.Contains(out, "at each size") {
		t.Errorf("-n 20:\n%s", out)
	}
}

// TestBandwidthDigits: from 1 GB/s up the bandwidths are nccl-tests'
// %6.2f; below, more decimals in the same 6 characters (3 significant
// digits down to 0.01, 2 below).
func TestBandwidthDigits(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0, "  0.00"}, {1, "  1.00"}, {1.6308, "  1.63"}, {150.24, "150.24"}, {1234.5, "1234.5"},
		{0.9995, "  1.00"}, {0.9994, " 0.999"}, {0.1631, " 0.163"}, {0.1, " 0.100"}, {0.09994, "0.0999"},
		{0.0171, "0.0171"}, {0.01, "0.0100"}, {0.00836, "0.0084"}, {0.001, "0.0010"},
		{0.00097, "9.7e-4"}, {0.000996, "0.0010"}, {0.000994, "9.9e-4"}, {0.0009951, "0.0010"}, {5.6e-5, "5.6e-5"}, {1.04e-7, "1.0e-7"}, {3e-12, " 3e-12"},
	} {
		if got := bwFloat(tc.v, 6); got != tc.want {
			t.Errorf("bwFloat(%v, 6) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

// TestTableWriterTables: an operation's tables are written whole when a
// row of another operation comes, or at Close.
func TestTableWriterTables(t *testing.T) {
	res := tableResult(nil)
	var b bytes.Buffer
	tw := NewTableWriter(&b, res.Ranks, res.Spec, nil)
	for _, row := range res.Rows[:3] {
		if err := tw.Row(row); err != nil {
			t.Fatal(err)
		}
	}
	if b.Len() != 0 || !tw.Open() {
		t.Fatalf("after allreduce's rows:\n%s", b.String())
	}
	tw.Row(res.Rows[3]) // broadcast: writes allreduce's table
	if strings.Count(b.String(), "Avg bus bandwidth") != 1 || !strings.Contains(b.String(), "# Out of bounds values : 3 FAILED") ||
		!strings.Contains(b.String(), res.Rows[2].line()+"\n# Out of bounds") || strings.Contains(b.String(), "broadcast") {
		t.Fatalf("after the second op's first row:\n%s", b.String())
	}
	// The mean over both forms of every row, as nccl-tests averages.
	if want := "# Avg bus bandwidth    : " + cFloat((0.00097+0.00101+0.0171+0.00836+0.1631+1.6308)/6) + " \n"; !strings.Contains(b.String(), want) {
		t.Errorf("lacks %q:\n%s", want, b.String())
	}
	if err := tw.Close(); err != nil || tw.Open() || strings.Count(b.String(), "Avg bus bandwidth") != 2 || !strings.Contains(b.String(), "N/A (not checked)") {
		t.Errorf("after Close (%v):\n%s", err, b.String())
	}
}
