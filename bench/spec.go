package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// Spec is what to measure. The zero value of every field means its default;
// Run works on a validated copy. Every rank must pass an equal Spec (the
// sizes and iteration counts, and so the order of collectives, are derived
// from it).
type Spec struct {
	// Ops are the operations to measure, in order: "allreduce",
	// "allgather", "reducescatter", "broadcast", "reduce", "alltoall" and
	// "sendrecv" (each rank sends to rank+1 and receives from rank−1 at
	// once: the transport's own ceiling) and "reducescatter_ar"
	// (ReduceScatter's result by a full AllReduce and a copy of this rank's
	// block, as numr composes it). If nil, defaults to DefaultOps.
	Ops []string
	// MinBytes and MaxBytes bound the sizes, as nccl-tests' -b and -e; the
	// sizes are MinBytes, MinBytes·Factor, … up to MaxBytes. A size is in
	// nccl-tests' convention: the buffer of AllReduce, Broadcast, Reduce and
	// sendrecv, the whole receive buffer of AllGather, the whole send buffer
	// of ReduceScatter and AllToAll. It is rounded down to whole elements
	// (times the number of ranks where blocks are per rank); sizes that round
	// to zero are skipped. If zero, default to 8 B and 64 MiB.
	MinBytes, MaxBytes int64
	// Factor multiplies the size from one step to the next (nccl-tests -f).
	// If zero, defaults to 2.
	Factor int
	// StepBytes, if not zero, adds this many bytes from one step to the
	// next instead of multiplying by Factor (nccl-tests -i).
	StepBytes int64
	// DType is the element type. If zero, defaults to comm.F32.
	DType comm.DType
	// Op is the reduction of the reducing operations. If zero, defaults to
	// comm.Sum.
	Op comm.ReduceOp
	// Root is the root of Broadcast and Reduce.
	Root int
	// Warmup is the number of untimed iterations before each size, the
	// check's run included; the last one also calibrates Iters. If zero,
	// defaults to 2.
	Warmup int
	// Iters is the number of timed iterations of each repeat. If zero, it is
	// chosen per size so that a repeat lasts about Budget (at least 1,
	// at most MaxIters), from the slowest rank's warmup time.
	Iters int
	// Budget is the time a repeat aims for when Iters is zero. If zero,
	// defaults to 50 ms.
	Budget time.Duration
	// Repeats is how many times each size is timed; the row reports the
	// median. When Iters is zero and one iteration takes longer than
	// Repeats × Budget, the size is timed once instead (it is long enough to
	// be stable, and repeating it would dominate the run). If zero, defaults
	// to 3.
	Repeats int
	// Settle, if positive, makes RunCompare time a size of its first two
	// contenders again when their comparison is not settled: when the
	// first's speedup over the second (the second's time ÷ the first's)
	// may be below Settle — the low end of its range (Pair.Range: the
	// second's first quartile ÷ the first's third) is — the two
	// get Repeats more alternating repeats of that size and form, once,
	// and their rows report all of them. A few repeats of a small call on
	// shared cores spread too widely to tell a 5% loss from noise; the
	// sizes that might lose so get the repeats that decide it, and the
	// others none. A contender that timed the size once (too long to
	// repeat) gets two more runs instead of Repeats: one run of a 64 MiB
	// call on shared cores is as much a moment as a few repeats of a
	// small one. Zero: no second look.
	Settle float64
	// Sync, if set, is the communicator whose Barrier starts every timed
	// repeat of every contender in RunCompare, and the check's run that
	// stands as the timing of a size too long to repeat (it must hold the
	// same ranks as they do); if nil, each contender's own Barrier does.
	// A rank's time of a repeat runs from the moment it leaves that
	// Barrier, so how a Barrier lets the ranks go is part of what the
	// repeat measures: over the same point-to-point path, the hierarchy's
	// small sendrecv read about 5% slower after its own Barrier than after
	// the flat world's (docs/benchmarks.md). A common Barrier measures
	// every contender from the same start.
	Sync comm.Communicator `json:"-"`
	// InPlace also measures each operation's in-place form, nccl-tests'
	// second group of columns (Row.InPlace): AllReduce and Reduce with
	// send == recv, AllGather with send = block rank of recv, ReduceScatter
	// with recv = block rank of send. Broadcast (one buffer: always in
	// place), AllToAll and sendrecv have no separate in-place form.
	InPlace bool
	// Average is how the ranks' times per iteration combine into a row's
	// time, as nccl-tests -a. The zero value is AvgRanks, nccl-tests'
	// default.
	Average Average
	// Check fills every rank's buffers with rank-distinct data once per
	// size, runs the operation, and counts the elements that differ from a
	// sequential reference (nccl-tests' #wrong). The data is chosen so that
	// the exact result does not depend on the order of reduction.
	Check bool
	// Progress, if set, is called on every rank with each row as soon as it
	// is measured (the same row on every rank).
	Progress func(Row) `json:"-"`
	// Traffic, if set, reads this rank's inter-node byte counter (bytes
	// sent so far over its links to other nodes: a NIC's counter, or what
	// a rate-limiting wrapper charged). Run reads it around each timed
	// repeat and reports the bytes per iteration in Row.NetBytes.
	// Every rank must set it or none. It must not block for long.
	Traffic func() (int64, error) `json:"-"`
}

// DefaultOps is the operations a Spec with no Ops measures.
var DefaultOps = []string{"allreduce", "allgather", "reducescatter", "broadcast", "sendrecv"}

// Defaults of Spec.
const (
	DefaultMinBytes = 8
	DefaultMaxBytes = 64 << 20
	DefaultFactor   = 2
	DefaultWarmup   = 2
	DefaultBudget   = 50 * time.Millisecond
	DefaultRepeats  = 3
	// MaxIters caps the iterations of a repeat chosen from Budget.
	MaxIters = 10000
	// MaxLinearSizes caps the sizes of a sweep by StepBytes.
	MaxLinearSizes = 1024
)

// withDefaults validates spec for a communicator of size ranks and returns
// a copy with every default filled in.
func (spec Spec) withDefaults(size int) (Spec, error) {
	s := spec
	s.Ops = slices.Clone(s.Ops)
	if len(s.Ops) == 0 {
		s.Ops = slices.Clone(DefaultOps)
	}
	if s.MinBytes == 0 {
		s.MinBytes = DefaultMinBytes
	}
	if s.MaxBytes == 0 {
		s.MaxBytes = max(DefaultMaxBytes, s.MinBytes)
	}
	if s.Factor == 0 {
		s.Factor = DefaultFactor
	}
	if s.DType == 0 {
		s.DType = comm.F32
	}
	if s.Op == 0 {
		s.Op = comm.Sum
	}
	if s.Warmup == 0 {
		s.Warmup = DefaultWarmup
	}
	if s.Budget == 0 {
		s.Budget = DefaultBudget
	}
	if s.Repeats == 0 {
		s.Repeats = DefaultRepeats
	}
	bad := func(format string, a ...any) (Spec, error) {
		return spec, fmt.Errorf("bench.Spec: "+format, a...)
	}
	reduces := false
	for _, name := range s.Ops {
		def, ok := opDefs[name]
		if !ok {
			return bad("unknown op %q (want one of %s)", name, strings.Join(OpNames(), ", "))
		}
		reduces = reduces || def.kind.Reduces()
	}
	switch {
	case s.MinBytes < 0 || s.MaxBytes < s.MinBytes:
		return bad("sizes %d … %d bytes: want 0 < MinBytes ≤ MaxBytes", s.MinBytes, s.MaxBytes)
	case s.Factor < 2 && s.StepBytes == 0:
		return bad("Factor %d: want ≥ 2", s.Factor)
	case s.StepBytes < 0:
		return bad("StepBytes %d: want ≥ 0", s.StepBytes)
	case s.StepBytes > 0 && (s.MaxBytes-s.MinBytes)/s.StepBytes >= MaxLinearSizes:
		return bad("sizes %d … %d bytes in steps of %d: more than %d sizes; take a larger step", s.MinBytes, s.MaxBytes, s.StepBytes, MaxLinearSizes)
	case s.Average < AvgRanks || s.Average > MaxRanks:
		return bad("unknown Average %d", int(s.Average))
	case !s.DType.Valid():
		return bad("invalid dtype %v", s.DType)
	case s.Root < 0 || s.Root >= size:
		return bad("Root %d is outside [0, %d)", s.Root, size)
	case !(s.Settle >= 0):
		return bad("Settle %v must be a speedup ≥ 0 (0: no second look)", s.Settle)
	case s.Warmup < 0 || s.Iters < 0 || s.Repeats < 0 || s.Budget < 0:
		return bad("Warmup %d, Iters %d, Repeats %d and Budget %v must not be negative", s.Warmup, s.Iters, s.Repeats, s.Budget)
	}
	if reduces {
		if err := comm.CanReduce(s.DType, s.Op); err != nil {
			return bad("%v", err)
		}
	}
	return s, nil
}

// sizes are the byte sizes of the sweep, before rounding to an op's unit.
func (s Spec) sizes() []int64 {
	var out []int64
	if s.StepBytes > 0 {
		for b := s.MinBytes; b <= s.MaxBytes; b += s.StepBytes {
			out = append(out, b)
			if b > s.MaxBytes-s.StepBytes {
				break
			}
		}
		return out
	}
	for b := s.MinBytes; b <= s.MaxBytes; b *= int64(s.Factor) {
		out = append(out, b)
		if b > s.MaxBytes/int64(s.Factor) {
			break
		}
	}
	return out
}

// Step is one row a run will measure: an operation at a size (on each
// communicator of a RunCompare in turn).
type Step struct {
	Op    string
	Bytes int64
}

// Plan lists the steps Run measures for spec on a communicator of size
// ranks, in order: what a progress display counts. It fails as Run would
// on a bad Spec.
func (spec Spec) Plan(size int) ([]Step, error) {
	s, err := spec.withDefaults(size)
	if err != nil {
		return nil, err
	}
	var out []Step
	for _, name := range s.Ops {
		for _, b := range opDefs[name].sizesFor(s, size) {
			out = append(out, Step{Op: name, Bytes: b})
		}
	}
	return out, nil
}

// Average is how the ranks' times combine into a row's time (nccl-tests
// -a): each rank times its own loop of iterations, and the row reports the
// mean over the ranks (AvgRanks, the default), rank 0's time, the fastest
// rank's or the slowest rank's.
type Average int

const (
	AvgRanks  Average = iota // mean over the ranks (nccl-tests -a 1, its default)
	Rank0Time                // rank 0's time (-a 0)
	MinRanks                 // the fastest rank's time (-a 2)
	MaxRanks                 // the slowest rank's time (-a 3)
)

// AverageFromNCCL maps nccl-tests' -a values (0 rank 0, 1 mean, 2 min,
// 3 max) to an Average.
func AverageFromNCCL(a int) (Average, error) {
	switch a {
	case 0:
		return Rank0Time, nil
	case 1:
		return AvgRanks, nil
	case 2:
		return MinRanks, nil
	case 3:
		return MaxRanks, nil
	}
	return 0, fmt.Errorf("%d: want 0 (rank 0's time), 1 (mean over ranks), 2 (fastest rank) or 3 (slowest rank)", a)
}

// NCCL is a's value of nccl-tests -a.
func (a Average) NCCL() int { return [...]int{1, 0, 2, 3}[a] }

// String names a in words: "mean over ranks", "rank 0", "fastest rank",
// "slowest rank".
func (a Average) String() string {
	switch a {
	case AvgRanks:
		return "mean over ranks"
	case Rank0Time:
		return "rank 0"
	case MinRanks:
		return "fastest rank"
	case MaxRanks:
		return "slowest rank"
	}
	return fmt.Sprintf("Average(%d)", int(a))
}

// ParseSize reads a byte size as nccl-tests' -b and -e do: a number with an
// optional K, M or G suffix (powers of 1024; a trailing B or iB is
// accepted): "8", "64K", "64M", "1GiB".
func ParseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("bad size %q: want a non-negative number with an optional K, M or G suffix, e.g. 64M", s)
	}
	return v * mult, nil
}

// FormatSize writes n bytes the way ParseSize reads them back, with the
// largest suffix that divides it ("64M", "1536K", "8").
func FormatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
