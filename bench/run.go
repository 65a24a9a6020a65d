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
	res, err := RunCompare(ctx, []Contender{{Comm: c}}, spec)
	res.Comms = nil
	return res, err
}

// Contender is one communicator of a RunCompare, and the name its rows
// carry (Row.Comm).
type Contender struct {
	Name string
	Comm comm.Communicator
}

// RunCompare measures spec on several communicators of the same ranks,
// interleaved: for each operation and size, each contender in turn, so
// that a slow moment of the machine falls on all of them alike. Every rank
// must pass contenders of the same names in the same order; they must
// have the same rank and size, and nothing else may use them meanwhile.
// The rows are as Run's, with Row.Comm set; Result.Comms lists the names.
func RunCompare(ctx context.Context, contenders []Contender, spec Spec) (Result, error) {
	if len(contenders) == 0 {
		return Result{}, fmt.Errorf("bench.RunCompare: no communicators")
	}
	c0 := contenders[0].Comm
	p, rank := c0.Size(), c0.Rank()
	res := Result{Ranks: p}
	for i, ct := range contenders {
		if ct.Comm.Size() != p || ct.Comm.Rank() != rank {
			return res, fmt.Errorf("bench.RunCompare: %q is rank %d of %d, %q rank %d of %d: the contenders must hold the same ranks",
				ct.Name, ct.Comm.Rank(), ct.Comm.Size(), contenders[0].Name, rank, p)
		}
		if slices.ContainsFunc(contenders[:i], func(o Contender) bool { return o.Name == ct.Name }) {
			return res, fmt.Errorf("bench.RunCompare: two communicators named %q", ct.Name)
		}
		res.Comms = append(res.Comms, ct.Name)
	}
	s, err := spec.withDefaults(p)
	if err != nil {
		return res, err
	}
	res.Spec = s
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
			for _, ct := range contenders {
				row, err := measure(ctx, ct.Comm, s, cl, g, b)
				row.Comm = ct.Name
				if err != nil {
					on := ""
					if ct.Name != "" {
						on = " (" + ct.Name + ")"
					}
					return res, fmt.Errorf("bench: %s of %d bytes on %d ranks%s: %w", name, b, p, on, err)
				}
				res.Rows = append(res.Rows, row)
				if s.Progress != nil {
					s.Progress(row)
				}
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

	var net0 int64
	if s.Traffic != nil {
		var err error
		if net0, err = s.Traffic(); err != nil {
			return row, fmt.Errorf("reading the inter-node byte counter: %w", err)
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
	if s.Traffic != nil {
		net1, err := s.Traffic()
		if err != nil {
			return row, fmt.Errorf("reading the inter-node byte counter: %w", err)
		}
		per := float64(net1-net0) / float64(iters*repeats)
		sum, most := []float64{per}, []float64{per}
		if err := c.AllReduce(ctx, comm.Host(sum), comm.Host(sum), comm.Sum); err != nil {
			return row, err
		}
		if err := c.AllReduce(ctx, comm.Host(most), comm.Host(most), comm.Max); err != nil {
			return row, err
		}
		row.HasNet, row.NetBytes, row.NetBytesMax = true, sum[0]/float64(p), most[0]
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
