package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

func TestBusFactor(t *testing.T) {
	for _, tc := range []struct {
		op   string
		p    int
		want float64
	}{
		{"allreduce", 1, 0},
		{"allreduce", 2, 1},
		{"allreduce", 4, 1.5},
		{"allreduce", 8, 1.75},
		{"allgather", 4, 0.75},
		{"reducescatter", 4, 0.75},
		{"alltoall", 5, 0.8},
		{"broadcast", 4, 1},
		{"reduce", 4, 1},
		{"sendrecv", 4, 1},
		{"sendrecv", 1, 1},
		{"nosuchop", 4, 0},
		{"allreduce", 0, 0},
	} {
		if got := BusFactor(tc.op, tc.p); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("BusFactor(%q, %d) = %v, want %v", tc.op, tc.p, got, tc.want)
		}
	}
}

func TestFormat(t *testing.T) {
	res := Result{
		Ranks: 4,
		Spec:  Spec{MinBytes: 8, MaxBytes: 128 << 20, Factor: 2, Warmup: 2, Iters: 20, Repeats: 3, Check: true},
		Rows: []Row{
			{Op: "allreduce", Bytes: 8, Count: 2, DType: comm.F32, RedOp: comm.Sum, Root: -1, TimeUS: 12.345, AlgBW: 0.00065, BusBW: 0.00097, Wrong: 0},
			{Op: "allreduce", Bytes: 134217728, Count: 33554432, DType: comm.F32, RedOp: comm.Sum, Root: -1, TimeUS: 123456.7, AlgBW: 1.0872, BusBW: 1.6308, Wrong: 3},
			{Op: "broadcast", Bytes: 1024, Count: 128, DType: comm.F64, Root: 2, TimeUS: 234.56, AlgBW: 4.3656, BusBW: 4.3656, Wrong: -1},
		},
	}
	var b bytes.Buffer
	if err := res.Format(&b); err != nil {
		t.Fatal(err)
	}
	want := `# hiercomm bench: allreduce_perf
# nRanks 4 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 2 iters: 20 repeats: 3(median) validation: 1
#
#       size         count      type   redop    root     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    12.35    0.00    0.00       0
   134217728      33554432     float     sum      -1   123457    1.09    1.63       3
# Out of bounds values : 3 FAILED
# Avg bus bandwidth    : 0.8159
#
# hiercomm bench: broadcast_perf
# nRanks 4 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 2 iters: 20 repeats: 3(median) validation: 1
#
#       size         count      type   redop    root     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)
        1024           128    double    none       2    234.6    4.37    4.37     N/A
# Out of bounds values : N/A
# Avg bus bandwidth    : 4.366
#
`
	if got := b.String(); got != want {
		t.Errorf("Format:\n%s\nwant:\n%s", got, want)
	}
	// Every line is a comment or a row of nine fields, as nccl-tests' parsers expect.
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if !strings.HasPrefix(line, "#") && len(strings.Fields(line)) != 9 {
			t.Errorf("row %q has %d fields, want 9", line, len(strings.Fields(line)))
		}
	}
	if res.Wrong() != 3 {
		t.Errorf("Wrong() = %d, want 3", res.Wrong())
	}
	if (Result{Rows: []Row{{Wrong: -1}}}).Wrong() != -1 {
		t.Error("Wrong() of unchecked rows should be -1")
	}
}

func TestFormatTime(t *testing.T) {
	for us, want := range map[float64]string{1.234: "   1.23", 99.994: "  99.99", 123.45: "  123.5", 9999.94: " 9999.9", 12345.6: "  12346"} {
		if got := formatTime(us); got != want {
			t.Errorf("formatTime(%v) = %q, want %q", us, got, want)
		}
	}
}
