package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// Run measures spec on c. Every rank of c must call it with an equal Spec,
// and nothing else may use c meanwhile. Every rank gets the same Result:
// each size's time is the maximum over the ranks (an AllReduce of the
// per-rank times), and #wrong is the sum over the ranks. Print it on rank 0.
//
// Per size and operation, Run: checks the result once (with Check; that run
// counts as the first warmup iteration), runs the Warmup untimed
// iterations, picks the iteration count from the slowest
// rank's last warmup (unless Iters is set), then Repeats times: a Barrier,
// then Iters back-to-back blocking calls, timed on each rank. The row's time
// is the median over the repeats of the slowest rank's time per iteration.
// When Iters is chosen and one iteration outlasts Repeats × Budget, the size
// is timed once.
//
// An error (a failed collective, a bad Spec) ends the run on every rank; the
// Result holds the rows measured before it.
func Run(ctx context.Context, c comm.Communicator, spec Spec) (Result, error) {
	p, rank := c.Size(), c.Rank()
	s, err := spec.withDefaults(p)
	if err != nil {
		return Result{}, err
	}
	res := Result{Ranks: p, Spec: s}
	es := s.DType.Size()
	for _, name := range s.Ops {
		d := opDefs[name]
		sizes := d.sizesFor(s, p)
		if len(sizes) == 0 {
			continue
		}
		op := comm.ReduceOp(0)
		if d.reduces() {
			op = s.Op
		}
		bufs := newBuffers(d, int(sizes[len(sizes)-1])/es, es, p, rank, s.Root)
		g := newGen(s.DType, op, p)
		for _, b := range sizes {
			cl, err := newCall(d, bufs, s.DType, op, int(b)/es, p, rank, s.Root)
			if err != nil {
				return res, err
			}
			row, err := measure(ctx, c, s, cl, g, b)
			if err != nil {
				return res, fmt.Errorf("bench: %s of %d bytes on %d ranks: %w", name, b, p, err)
			}
			res.Rows = append(res.Rows, row)
			if s.Progress != nil {
				s.Progress(row)
			}
		}
	}
	return res, nil
}

// measure produces the row of one operation at one size.
func measure(ctx context.Context, c comm.Communicator, s Spec, cl call, g gen, bytes int64) (Row, error) {
	p, rank := c.Size(), c.Rank()
	run := func() error { return cl.run(ctx, c) }
	row := Row{Op: cl.def.name, Bytes: bytes, Count: bytes / int64(s.DType.Size()), DType: s.DType, Root: -1, Wrong: -1}
	if cl.def.reduces() {
		row.RedOp = s.Op
	}
	if cl.def.rooted() {
		row.Root = s.Root
	}
	var last time.Duration // the last untimed iteration, for the calibration
	timed := func() error {
		t0 := time.Now()
		err := run()
		last = time.Since(t0)
		return err
	}
	warmup := s.Warmup
	if s.Check {
		// The check's own run is the first warmup iteration.
		wrong, err := cl.check(g, rank, p, timed)
		if err != nil {
			return row, err
		}
		total := []int64{wrong}
		if err := c.AllReduce(ctx, comm.Host(total), comm.Host(total), comm.Sum); err != nil {
			return row, err
		}
		row.Wrong = total[0]
		warmup--
	}
	for range warmup {
		if err := timed(); err != nil {
			return row, err
		}
	}
	iters, repeats := s.Iters, s.Repeats
	if iters == 0 {
		slowest := []float64{last.Seconds()}
		if err := c.AllReduce(ctx, comm.Host(slowest), comm.Host(slowest), comm.Max); err != nil {
			return row, err
		}
		iters = itersFor(s.Budget, slowest[0])
		if slowest[0] > float64(s.Repeats)*s.Budget.Seconds() {
			// One iteration outlasts every repeat's budget together: it is
			// long enough to time once, and repeating it would dominate the run.
			repeats = 1
		}
	}

	times := make([]float64, repeats) // seconds per iteration, this rank
	for k := range times {
		if err := c.Barrier(ctx); err != nil {
			return row, err
		}
		t0 := time.Now()
		for range iters {
			if err := run(); err != nil {
				return row, err
			}
		}
		times[k] = time.Since(t0).Seconds() / float64(iters)
	}
	if err := c.AllReduce(ctx, comm.Host(times), comm.Host(times), comm.Max); err != nil {
		return row, err
	}
	t := median(times)
	row.Iters, row.Repeats = iters, repeats
	row.TimeUS = t * 1e6
	if t > 0 {
		row.AlgBW = float64(bytes) / t / 1e9
	}
	row.BusBW = row.AlgBW * cl.def.busFactor(float64(p))
	return row, nil
}

// itersFor is the number of iterations of per seconds each that fills
// budget: at least 1, at most MaxIters.
func itersFor(budget time.Duration, per float64) int {
	if per <= 0 {
		return MaxIters
	}
	n := math.Ceil(budget.Seconds() / per)
	return int(min(max(n, 1), MaxIters))
}

// median of xs (the mean of the middle two for an even count); xs is sorted
// in place.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	m := len(xs) / 2
	if len(xs)%2 == 1 {
		return xs[m]
	}
	return (xs[m-1] + xs[m]) / 2
}
