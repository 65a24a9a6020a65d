package bench

import (
	"math"
	"testing"
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

func TestResultWrong(t *testing.T) {
	res := Result{Rows: []Row{
		{Timing: Timing{Wrong: 0}, InPlace: &Timing{Wrong: 2}},
		{Timing: Timing{Wrong: 3}},
		{Timing: Timing{Wrong: -1}},
	}}
	if res.Wrong() != 5 {
		t.Errorf("Wrong() = %d, want 5 (both forms counted)", res.Wrong())
	}
	if (Result{Rows: []Row{{Timing: Timing{Wrong: -1}}}}).Wrong() != -1 {
		t.Error("Wrong() of unchecked rows should be -1")
	}
}

func TestFormatTime(t *testing.T) {
	// nccl-tests keeps 2 decimals while they fit in 7 characters.
	for us, want := range map[float64]string{1.234: "   1.23", 99.994: "  99.99", 123.45: " 123.45", 9999.94: "9999.94", 12345.64: "12345.6", 1234567.8: "1234568", 12345678.9: "1.2e+07"} {
		if got := formatTime(us); got != want {
			t.Errorf("formatTime(%v) = %q, want %q", us, got, want)
		}
	}
}
