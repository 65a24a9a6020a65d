package bench

import (
	"slices"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

func TestSpecDefaults(t *testing.T) {
	s, err := Spec{}.withDefaults(4)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Ops, DefaultOps) || s.MinBytes != 8 || s.MaxBytes != 64<<20 || s.Factor != 2 ||
		s.DType != comm.F32 || s.Op != comm.Sum || s.Warmup != DefaultWarmup || s.Repeats != DefaultRepeats || s.Budget != DefaultBudget {
		t.Errorf("defaults: %+v", s)
	}
	sizes := s.sizes()
	if len(sizes) != 24 || sizes[0] != 8 || sizes[23] != 64<<20 {
		t.Errorf("default sweep has %d sizes %v … %v, want 24 from 8 to 64 MiB", len(sizes), sizes[0], sizes[len(sizes)-1])
	}
	// The caller's Ops are not shared with the copy.
	ops := []string{"allreduce"}
	s, _ = Spec{Ops: ops}.withDefaults(1)
	s.Ops[0] = "broadcast"
	if ops[0] != "allreduce" {
		t.Error("withDefaults aliased the caller's Ops")
	}
}

func TestSpecRefuses(t *testing.T) {
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{Ops: []string{"all_reduce"}}, "unknown op"},
		{Spec{MinBytes: 1024, MaxBytes: 8}, "MinBytes ≤ MaxBytes"},
		{Spec{MinBytes: -1}, "MinBytes"},
		{Spec{Factor: 1}, "Factor"},
		{Spec{DType: 99}, "dtype"},
		{Spec{Root: 4}, "Root"},
		{Spec{Iters: -1}, "negative"},
		{Spec{Ops: []string{"allreduce"}, DType: comm.U8, Op: comm.Avg}, "avg"},
	} {
		_, err := tc.spec.withDefaults(4)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one that mentions %q", tc.spec, err, tc.want)
		}
	}
	// Avg on integers is fine when nothing reduces.
	if _, err := (Spec{Ops: []string{"allgather"}, DType: comm.U8, Op: comm.Avg}).withDefaults(4); err != nil {
		t.Error(err)
	}
}

func TestSizesFor(t *testing.T) {
	s, err := Spec{MinBytes: 8, MaxBytes: 100, Factor: 2}.withDefaults(3)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.sizes(), []int64{8, 16, 32, 64}; !slices.Equal(got, want) {
		t.Errorf("sizes = %v, want %v", got, want)
	}
	// AllGather on 3 ranks of f32: whole multiples of 12 bytes; 8 rounds to
	// 0 and is skipped.
	if got, want := opDefs["allgather"].sizesFor(s, 3), []int64{12, 24, 60}; !slices.Equal(got, want) {
		t.Errorf("allgather sizes = %v, want %v", got, want)
	}
	if got, want := opDefs["allreduce"].sizesFor(s, 3), []int64{8, 16, 32, 64}; !slices.Equal(got, want) {
		t.Errorf("allreduce sizes = %v, want %v", got, want)
	}
	// Sizes near the int64 limit do not overflow.
	s, _ = Spec{MinBytes: 1 << 61, MaxBytes: 1<<62 + 1, Factor: 3}.withDefaults(1)
	if got := s.sizes(); len(got) != 1 {
		t.Errorf("huge sizes = %v", got)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"8": 8, "64K": 64 << 10, "64k": 64 << 10, "64M": 64 << 20, "1G": 1 << 30, "2GiB": 2 << 30, "16MB": 16 << 20, " 3 ": 3, "0": 0} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
		if err == nil && in == strings.TrimSpace(in) && !strings.HasSuffix(strings.ToUpper(in), "B") && in != "64k" {
			if back := FormatSize(got); back != in {
				t.Errorf("FormatSize(%d) = %q, want %q", got, back, in)
			}
		}
	}
	for _, in := range []string{"", "M", "-1", "1.5M", "8X", "99999999999G"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
	if got := FormatSize(1536 << 10); got != "1536K" {
		t.Errorf("FormatSize(1.5 MiB) = %q", got)
	}
}

func TestPlanAndStepBytes(t *testing.T) {
	plan, err := Spec{Ops: []string{"allreduce", "allgather"}, MinBytes: 8, MaxBytes: 32, Factor: 2}.Plan(4)
	if err != nil {
		t.Fatal(err)
	}
	// allgather on 4 ranks of f32 rounds to multiples of 16: 8 is dropped, 32 stays.
	want := []Step{{"allreduce", 8}, {"allreduce", 16}, {"allreduce", 32}, {"allgather", 16}, {"allgather", 32}}
	if !slices.Equal(plan, want) {
		t.Errorf("Plan = %v, want %v", plan, want)
	}
	s, err := Spec{MinBytes: 100, MaxBytes: 400, StepBytes: 150}.withDefaults(2)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.sizes(); !slices.Equal(got, []int64{100, 250, 400}) {
		t.Errorf("StepBytes 150 from 100 to 400: %v, want 100 250 400", got)
	}
	if _, err := (Spec{StepBytes: -1}).Plan(2); err == nil {
		t.Error("negative StepBytes accepted")
	}
	if _, err := (Spec{MinBytes: 1, MaxBytes: 1 << 30, StepBytes: 1}).Plan(2); err == nil {
		t.Error("a linear sweep of 2^30 sizes accepted")
	}
}
