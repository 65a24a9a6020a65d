package bench

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar"
)

// runWorld runs Run on every rank of an in-memory world of p ranks, each
// rank's communicator passed through wrap (nil: as is), and returns every
// rank's Result.
func runWorld(t *testing.T, p int, spec Spec, wrap func(comm.Communicator) comm.Communicator) []Result {
	t.Helper()
	return eachRank(t, p, func(ctx context.Context, r int, c comm.Communicator) (Result, error) {
		if wrap != nil {
			c = wrap(c)
		}
		return Run(ctx, c, spec)
	})
}

// eachRank runs measure on every rank of an in-memory world of p ranks at
// once and returns every rank's Result; an error fails the test.
func eachRank(t *testing.T, p int, measure func(ctx context.Context, r int, c comm.Communicator) (Result, error)) []Result {
	t.Helper()
	cs, err := nexar.NewMemoryWorld(p, nexar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nexar.CloseAll(cs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	results := make([]Result, p)
	errs := make([]error, p)
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() { results[r], errs[r] = measure(ctx, r, c) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return results
}

// quick is a Spec that runs in milliseconds.
func quick(ops ...string) Spec {
	return Spec{Ops: ops, MinBytes: 8, MaxBytes: 4 << 10, Factor: 4, Warmup: 1, Iters: 2, Repeats: 1, Check: true, InPlace: true}
}

func TestRunEveryOp(t *testing.T) {
	for _, p := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("P=%d", p), func(t *testing.T) {
			spec := quick(OpNames()...)
			spec.Root = p - 1
			res := runWorld(t, p, spec, nil)
			for r := 1; r < p; r++ {
				if len(res[r].Rows) != len(res[0].Rows) {
					t.Fatalf("rank %d has %d rows, rank 0 %d", r, len(res[r].Rows), len(res[0].Rows))
				}
				for i, row := range res[r].Rows {
					if !reflect.DeepEqual(row, res[0].Rows[i]) {
						t.Errorf("rank %d row %d = %+v, rank 0 has %+v (every rank must get the same table)", r, i, row, res[0].Rows[i])
					}
				}
			}
			seen := map[string]int{}
			for _, row := range res[0].Rows {
				seen[row.Op]++
				if row.Wrong != 0 {
					t.Errorf("%s %d B: %d wrong elements", row.Op, row.Bytes, row.Wrong)
				}
				if in := row.InPlace; opDefs[row.Op].hasInPlace() != (in != nil) {
					t.Errorf("%s %d B: in-place form %v, want one exactly when the op has it", row.Op, row.Bytes, in)
				} else if in != nil && (in.Wrong != 0 || in.TimeUS <= 0 || in.Iters != 2) {
					t.Errorf("%s %d B in place: %+v, want 0 wrong over 2 iterations", row.Op, row.Bytes, *in)
				}
				if row.TimeUS <= 0 || row.Iters != 2 || row.Repeats != 1 {
					t.Errorf("%s %d B: time %v µs over %d iterations × %d repeats", row.Op, row.Bytes, row.TimeUS, row.Iters, row.Repeats)
				}
				if want := row.AlgBW * BusFactor(row.Op, p); row.BusBW != want {
					t.Errorf("%s %d B: busbw %v, want algbw × factor = %v", row.Op, row.Bytes, row.BusBW, want)
				}
				if row.Bytes%int64(row.DType.Size()) != 0 || row.Count != row.Bytes/4 {
					t.Errorf("%s %d B: count %d", row.Op, row.Bytes, row.Count)
				}
			}
			for _, op := range OpNames() {
				if seen[op] == 0 {
					t.Errorf("no rows for %s", op)
				}
			}
		})
	}
}

// TestCheckEveryDType runs the check of the reducing operations over every
// dtype and op, so a wrong reference (rounding, wrapping, the choice of
// values) shows up as wrong elements.
func TestCheckEveryDType(t *testing.T) {
	for _, dt := range comm.DTypes {
		for _, op := range comm.ReduceOps {
			if comm.CanReduce(dt, op) != nil {
				continue
			}
			t.Run(fmt.Sprintf("%v/%v", dt, op), func(t *testing.T) {
				spec := quick("allreduce", "reducescatter", "reduce", "allgather", "alltoall")
				spec.MinBytes, spec.MaxBytes, spec.Factor = 24, 768, 32
				spec.DType, spec.Op, spec.Warmup, spec.Iters = dt, op, 1, 1
				for _, row := range runWorld(t, 3, spec, nil)[0].Rows {
					if row.Wrong != 0 || (row.InPlace != nil && row.InPlace.Wrong != 0) {
						t.Errorf("%s %d B: %d wrong elements (in place: %+v)", row.Op, row.Bytes, row.Wrong, row.InPlace)
					}
				}
			})
		}
	}
}

// corrupting flips one element of rank 1's f32 AllReduce results.
type corrupting struct{ comm.Communicator }

func (c corrupting) AllReduce(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp) error {
	err := c.Communicator.AllReduce(ctx, send, recv, op)
	if err == nil && c.Rank() == 1 && recv.DType() == comm.F32 && recv.Len() > 0 {
		recv.Bytes()[0] ^= 0x40 // the bench's own f64 and i64 AllReduces stay intact
	}
	return err
}

// shiftedReduceScatter hands rank r block r+1 of the reduction: the
// reference stack's ReduceScatter defect.
type shiftedReduceScatter struct{ comm.Communicator }

func (c shiftedReduceScatter) ReduceScatter(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp) error {
	full := make([]byte, send.ByteLen())
	all, err := comm.HostBytes(send.DType(), full)
	if err != nil {
		return err
	}
	if err := c.Communicator.AllReduce(ctx, send, all, op); err != nil {
		return err
	}
	n := recv.Len()
	copy(recv.Bytes(), all.Slice((c.Rank()+1)%c.Size()*n, n).Bytes())
	return nil
}

func TestCheckCatchesWrongResults(t *testing.T) {
	t.Run("one element", func(t *testing.T) {
		rows := runWorld(t, 3, quick("allreduce"), func(c comm.Communicator) comm.Communicator { return corrupting{c} })[0].Rows
		if len(rows) == 0 {
			t.Fatal("no rows")
		}
		for _, row := range rows {
			if row.Wrong != 1 || row.InPlace == nil || row.InPlace.Wrong != 1 {
				t.Errorf("%d B: #wrong = %d (in place %+v), want 1 in both forms (rank 1's first element)", row.Bytes, row.Wrong, row.InPlace)
			}
		}
	})
	t.Run("shifted block", func(t *testing.T) {
		rows := runWorld(t, 4, quick("reducescatter"), func(c comm.Communicator) comm.Communicator { return shiftedReduceScatter{c} })[0].Rows
		for _, row := range rows {
			if row.Wrong <= row.Count/2 || row.InPlace == nil || row.InPlace.Wrong <= row.Count/2 {
				t.Errorf("%d B: #wrong = %d of %d elements (in place %+v), want most of them in both forms", row.Bytes, row.Wrong, row.Count, row.InPlace)
			}
		}
	})
	t.Run("unchecked", func(t *testing.T) {
		spec := quick("allreduce")
		spec.Check = false
		for _, row := range runWorld(t, 2, spec, func(c comm.Communicator) comm.Communicator { return corrupting{c} })[0].Rows {
			if row.Wrong != -1 {
				t.Errorf("%d B: #wrong = %d without Check, want -1 (N/A)", row.Bytes, row.Wrong)
			}
		}
	})
}

func TestRunAdaptiveIters(t *testing.T) {
	spec := Spec{Ops: []string{"allreduce", "sendrecv"}, MinBytes: 8, MaxBytes: 64, Factor: 8, Budget: 20 * time.Millisecond, Repeats: 2}
	var progress []Row
	var mu sync.Mutex
	spec.Progress = func(r Row) { mu.Lock(); progress = append(progress, r); mu.Unlock() }
	res := runWorld(t, 2, spec, nil)[0]
	if len(res.Rows) != 4 || len(progress) != 2*len(res.Rows) {
		t.Fatalf("%d rows, %d progress calls; want 4 and 8", len(res.Rows), len(progress))
	}
	for _, row := range res.Rows {
		if row.Iters < 1 || row.Iters > MaxIters || row.Repeats != 2 {
			t.Errorf("%s %d B: %d iterations × %d repeats, want 1…%d × 2", row.Op, row.Bytes, row.Iters, row.Repeats, MaxIters)
		}
	}
	// With a budget far below one iteration, a size is timed once.
	spec.Budget, spec.Progress = time.Nanosecond, nil
	for _, row := range runWorld(t, 2, spec, nil)[0].Rows {
		if row.Iters != 1 || row.Repeats != 1 {
			t.Errorf("%s %d B: %d iterations × %d repeats under a 1 ns budget, want 1 × 1", row.Op, row.Bytes, row.Iters, row.Repeats)
		}
	}
	if res.Spec.Warmup != DefaultWarmup || res.Spec.Repeats != 2 || res.Spec.DType != comm.F32 || res.Spec.Op != comm.Sum {
		t.Errorf("Result.Spec = %+v, want the defaults filled in", res.Spec)
	}
}

// coldFirst is a communicator whose first AllReduce of cold bytes takes
// 100 ms longer, as a first call that makes a connection can.
type coldFirst struct {
	comm.Communicator
	bytes int
	done  bool
}

func (c *coldFirst) AllReduce(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp) error {
	if !c.done && send.ByteLen() == c.bytes {
		c.done = true
		time.Sleep(100 * time.Millisecond)
	}
	return c.Communicator.AllReduce(ctx, send, recv, op)
}

// TestRunConfirmsALongFirstRun: a size whose first run outlasts every
// repeat's budget together, and whose next runs do not, is timed as a
// short one (many iterations, every repeat), not once.
func TestRunConfirmsALongFirstRun(t *testing.T) {
	spec := Spec{Ops: []string{"allreduce"}, MinBytes: 64, MaxBytes: 64, Budget: 10 * time.Millisecond, Repeats: 3}
	for _, check := range []bool{false, true} {
		spec.Check = check
		row := runWorld(t, 2, spec, func(c comm.Communicator) comm.Communicator { return &coldFirst{Communicator: c, bytes: 64} })[0].Rows[0]
		if row.Repeats != 3 || row.Iters < 2 || row.TimeUS > 10000 {
			t.Errorf("check %v: a cold first run of 100 ms: %d iterations × %d repeats, %v µs each; want it timed as the short call it is", check, row.Iters, row.Repeats, row.TimeUS)
		}
	}
}

func TestRunRefusesBadSpec(t *testing.T) {
	cs, err := nexar.NewMemoryWorld(1, nexar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nexar.CloseAll(cs)
	_, err = Run(context.Background(), cs[0], Spec{Ops: []string{"allreduce"}, DType: comm.I32, Op: comm.Avg})
	if err == nil {
		t.Fatal("Run accepted avg on i32")
	}
}

func TestItersForAndMedian(t *testing.T) {
	for _, tc := range []struct {
		budget time.Duration
		per    float64
		want   int
	}{
		{50 * time.Millisecond, 0.01, 5},
		{50 * time.Millisecond, 0.011, 5},
		{50 * time.Millisecond, 1, 1},
		{50 * time.Millisecond, 1e-9, MaxIters},
		{50 * time.Millisecond, 0, MaxIters},
	} {
		if got := itersFor(tc.budget, tc.per); got != tc.want {
			t.Errorf("itersFor(%v, %v) = %d, want %d", tc.budget, tc.per, got, tc.want)
		}
	}
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
	for _, tc := range []struct {
		xs   []float64
		q    float64
		want float64
	}{{nil, 0.25, 0}, {[]float64{7}, 0.75, 7}, {[]float64{1, 2, 3, 4, 5}, 0.25, 2}, {[]float64{1, 2, 3}, 0.75, 2.5}, {[]float64{1, 2, 3}, 1, 3}} {
		if got := quantile(tc.xs, tc.q); got != tc.want {
			t.Errorf("quantile(%v, %v) = %v, want %v", tc.xs, tc.q, got, tc.want)
		}
	}
}

// TestCombine: each Average gives every rank the same combination of the
// ranks' times (rank r took r+1 and 10(r+1) seconds in two repeats).
func TestCombine(t *testing.T) {
	const p = 4
	cs, err := nexar.NewMemoryWorld(p, nexar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nexar.CloseAll(cs)
	for a, want := range map[Average][2]float64{AvgRanks: {2.5, 25}, Rank0Time: {1, 10}, MinRanks: {1, 10}, MaxRanks: {4, 40}} {
		got := make([][]float64, p)
		var wg sync.WaitGroup
		for r, c := range cs {
			got[r] = []float64{float64(r + 1), float64(10 * (r + 1))}
			wg.Go(func() {
				if err := combine(context.Background(), c, a, got[r]); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		for r := range got {
			if got[r][0] != want[0] || got[r][1] != want[1] {
				t.Errorf("%v: rank %d has %v, want %v", a, r, got[r], want)
			}
		}
	}
	for nccl, want := range map[int]Average{0: Rank0Time, 1: AvgRanks, 2: MinRanks, 3: MaxRanks} {
		if a, err := AverageFromNCCL(nccl); err != nil || a != want || a.NCCL() != nccl {
			t.Errorf("-a %d: %v, %v; want %v", nccl, a, err, want)
		}
	}
	if _, err := AverageFromNCCL(4); err == nil {
		t.Error("-a 4 accepted")
	}
}
