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
// each size's time combines the ranks' times as Spec.Average says (the
// mean over the ranks by default, as nccl-tests), and #wrong is the sum
// over the ranks. Print it on rank 0.
//
// Per size and operation, and per form (out of place, then in place with
// Spec.InPlace), Run: checks the result once (with Check; that run, after
// a Barrier, counts as the first warmup iteration), runs the rest of the
// Warmup untimed iterations (only one more when a call outlasts Budget on
// the slowest rank), picks the iteration count from the slowest
// rank's warmups (unless Iters is set; with Repeats > 1 the first timed
// repeat checks it), then Repeats times: a Barrier, then Iters
// back-to-back blocking calls, timed on each rank. Each rank's time per
// iteration is combined over the ranks per repeat, and the row reports
// the median over the repeats. When Iters is chosen and one
// iteration outlasts Repeats × Budget, the size is timed once: by the
// check's own run when it was the last warmup, else by one more run.
//
// An error (a failed collective, a bad Spec) ends the run on every rank; the
// Result holds the rows of the sizes measured before it (of every
// contender, with RunCompare: a size one of them failed has no rows).
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
// interleaved: for each operation and size, each contender is checked and
// warmed up in turn, and then their timed repeats alternate, so that a
// slow moment of the machine falls on all of them alike. Every rank
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
	if s := spec.Sync; s != nil && (s.Size() != p || s.Rank() != rank) {
		return res, fmt.Errorf("bench.RunCompare: Spec.Sync is rank %d of %d, %q rank %d of %d: it must hold the contenders' ranks",
			s.Rank(), s.Size(), contenders[0].Name, rank, p)
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
		inPlace := s.InPlace && d.hasInPlace()
		for _, b := range sizes {
			cl, err := newCall(d, bufs, s.DType, op, int(b)/es, p, rank, s.Root, false)
			if err != nil {
				return res, err
			}
			forms := []call{cl}
			if inPlace {
				in, err := newCall(d, bufs, s.DType, op, int(b)/es, p, rank, s.Root, true)
				if err != nil {
					return res, err
				}
				forms = append(forms, in)
			}
			rows := make([]Row, len(contenders))
			for i, ct := range contenders {
				rows[i] = newRow(s, d, b)
				rows[i].Comm = ct.Name
			}
			for f, fc := range forms {
				into := func(i int) *Timing { return &rows[i].Timing }
				if f > 0 {
					into = func(i int) *Timing { rows[i].InPlace = &Timing{}; return rows[i].InPlace }
				}
				if i, err := measureAll(ctx, contenders, s, fc, g, b, into); err != nil {
					on := ""
					if contenders[i].Name != "" {
						on = " (" + contenders[i].Name + ")"
					}
					return res, fmt.Errorf("bench: %s of %d bytes on %d ranks%s: %w", name, b, p, on, err)
				}
			}
			for _, row := range rows {
				res.Rows = append(res.Rows, row)
				if s.Progress != nil {
					s.Progress(row)
				}
			}
		}
	}
	return res, nil
}

// newRow is the row of op d at a size, before it is measured.
func newRow(s Spec, d opDef, bytes int64) Row {
	row := Row{Op: d.name, Bytes: bytes, Count: bytes / int64(s.DType.Size()), DType: s.DType, Root: -1}
	if d.reduces() {
		row.RedOp = s.Op
	}
	if d.rooted() {
		row.Root = s.Root
	}
	row.Wrong = -1
	return row
}

// measureAll times one form of an operation at one size on every
// contender, into into(i) for contender i. Each is checked, warmed up and
// calibrated in turn; then their timed repeats alternate (a repeat of the
// first, of the second, …, then the second repeat of each), so that a slow
// stretch of the machine, which on a few shared cores lasts longer than a
// repeat, falls on all of them alike instead of on one. On failure it
// returns the index of the contender that failed.
func measureAll(ctx context.Context, contenders []Contender, s Spec, cl call, g gen, bytes int64, into func(i int) *Timing) (int, error) {
	ts := make([]*timing, len(contenders))
	for i, ct := range contenders {
		sync := s.Sync
		if sync == nil {
			sync = ct.Comm
		}
		ts[i] = &timing{ctx: ctx, c: ct.Comm, sync: sync, s: s, cl: cl, bytes: bytes, t: into(i)}
		if err := ts[i].prepare(g); err != nil {
			return i, err
		}
	}
	for look := 0; ; look++ {
		for more := true; more; {
			more = false
			for i, tm := range ts {
				if tm.done() {
					continue
				}
				more = true
				if err := tm.repeat(); err != nil {
					return i, err
				}
			}
		}
		if look > 0 || s.Settle <= 0 || len(ts) < 2 {
			break
		}
		var q [2]float64 // the first's third quartile, the second's first
		for i := range q {
			var err error
			if q[i], err = ts[i].combinedQuantile(s.Average, 0.75-0.5*float64(i)); err != nil {
				return i, err
			}
		}
		if q[0] <= 0 || q[1]/q[0] >= s.Settle { // the low end of the speedup's range (Pair.Range)
			break
		}
		for _, tm := range ts[:2] {
			if tm.once {
				// One run of each cannot tell a loss from a slow moment:
				// two more of each, alternating, and the median of three.
				tm.repeats += onceMore
			} else {
				tm.repeats += s.Repeats
			}
		}
	}
	for i, tm := range ts {
		if err := tm.finish(); err != nil {
			return i, err
		}
	}
	return 0, nil
}

// timing is one communicator's measurement of one form of an operation at
// one size, in three steps: prepare (the check, the warmups and the
// iteration count), repeat (one timed repeat, until done), finish (the
// ranks' combination into the Timing).
type timing struct {
	ctx   context.Context
	c     comm.Communicator
	sync  comm.Communicator // whose Barrier starts each repeat (Spec.Sync)
	s     Spec
	cl    call
	bytes int64
	t     *Timing

	iters, repeats int
	times          []float64 // seconds per iteration of each kept repeat, this rank
	netSent        int64     // this rank's counter growth over the kept repeats
	netIters       int       // the iterations netSent covers
	// recheck: the first timed repeat also checks the iteration count,
	// which came from a few warmup iterations (see repeat).
	recheck bool
	// once: the size is too long to repeat, and was timed once (unless a
	// second look times it onceMore times more).
	once bool
}

// onceMore is how many more runs a second look (Spec.Settle) gives a
// size timed once, on each of the two contenders.
const onceMore = 2

func (m *timing) run() error { return m.cl.run(m.ctx, m.c) }

// readNet reads the inter-node byte counter (0 without one).
func (m *timing) readNet() (int64, error) {
	if m.s.Traffic == nil {
		return 0, nil
	}
	n, err := m.s.Traffic()
	if err != nil {
		return 0, fmt.Errorf("reading the inter-node byte counter: %w", err)
	}
	return n, nil
}

// prepare checks the result (with Check), runs the warmups and chooses the
// iterations and repeats.
func (m *timing) prepare(g gen) error {
	c, s := m.c, m.s
	ctx, p, rank := m.ctx, c.Size(), c.Rank()
	var last time.Duration // the last untimed iteration, for the calibration
	var lastNet int64      // the counter's growth over it
	timed := func() error {
		n0, err := m.readNet()
		if err != nil {
			return err
		}
		t0 := time.Now()
		err = m.run()
		last = time.Since(t0)
		if err != nil {
			return err
		}
		n1, err := m.readNet()
		lastNet = n1 - n0
		return err
	}
	m.t.Wrong = -1
	warmup := s.Warmup
	checkLast := false // the last untimed run was the check's, after a Barrier
	if s.Check {
		// The check's own run is the first warmup iteration. The Barrier
		// (Spec.Sync's, as before a repeat) lets it stand as the timing of
		// a size too long to repeat.
		if err := m.sync.Barrier(ctx); err != nil {
			return err
		}
		wrong, err := m.cl.check(g, rank, p, timed)
		if err != nil {
			return err
		}
		total := []int64{wrong}
		if err := c.AllReduce(ctx, comm.Host(total), comm.Host(total), comm.Sum); err != nil {
			return err
		}
		m.t.Wrong = total[0]
		warmup--
	}
	// Warming up is for calls short enough to be repeated: one that
	// outlasts the budget on the slowest rank is warm after one run, and
	// more would cost minutes at the large sizes. The first run (the
	// check's, or the first warmup) decides, on every rank alike.
	long := func() (bool, error) {
		if s.Iters != 0 || s.Budget <= 0 {
			return false, nil
		}
		worst := []float64{last.Seconds()}
		if err := c.AllReduce(ctx, comm.Host(worst), comm.Host(worst), comm.Max); err != nil {
			return false, err
		}
		return worst[0] > s.Budget.Seconds(), nil
	}
	if s.Check && warmup > 0 {
		l, err := long()
		if err != nil {
			return err
		}
		if l {
			warmup = 0
		}
	}
	checkLast = s.Check && warmup <= 0
	// The calibration takes the median of the warmup iterations but the
	// first, not the last one alone. One iteration of a call whose ranks
	// pipeline (Broadcast's root returns at once) lasts anything from its
	// share of the stream to a millisecond's hiccup on a shared core, and
	// the first also waits out the ranks' skew from what came before.
	// Timed by the last iteration alone, sizes of one call ran 13 or 40
	// iterations where their neighbours ran thousands, timing another
	// regime: on 2 cores over QUIC, the hierarchy's 8–1024-byte
	// Broadcast (its flat world part's own Broadcast) read 0.01–2.5 times
	// the flat one's speed from one run to the next. With the check (-c 1)
	// its run is the first warmup, and the loop's first is the second.
	var warm []float64
	for k := range warmup {
		if err := timed(); err != nil {
			return err
		}
		if k > 0 {
			warm = append(warm, last.Seconds())
		}
		if k == 0 && !s.Check && warmup > 1 {
			l, err := long()
			if err != nil {
				return err
			}
			if l {
				break
			}
		}
	}
	m.iters, m.repeats = s.Iters, s.Repeats
	if m.iters != 0 {
		return nil
	}
	per := last.Seconds()
	if len(warm) > 0 {
		per = median(warm)
	}
	slowest := []float64{per}
	if err := c.AllReduce(ctx, comm.Host(slowest), comm.Host(slowest), comm.Max); err != nil {
		return err
	}
	if len(warm) == 0 && slowest[0] > float64(s.Repeats)*s.Budget.Seconds() {
		// One run says the size is too long to repeat, and it was this
		// communicator's first at this size: it may have been cold (a
		// connection made on first use, buffers touched for the first
		// time). A second run, started together after a Barrier as the
		// check's is, confirms it and stands as the timing, or shows a
		// short call that is then timed as usual. Without it, the first
		// contender's 8-byte sendrecv of a run with 64 MiB buffers was
		// timed once, one iteration after a Barrier: 0.16 of flat's.
		if err := m.sync.Barrier(ctx); err != nil {
			return err
		}
		if err := timed(); err != nil {
			return err
		}
		slowest[0] = last.Seconds()
		if err := c.AllReduce(ctx, comm.Host(slowest), comm.Host(slowest), comm.Max); err != nil {
			return err
		}
		checkLast = true
	}
	m.iters = itersFor(s.Budget, slowest[0])
	m.recheck = m.repeats > 1
	if slowest[0] > float64(s.Repeats)*s.Budget.Seconds() {
		// One iteration outlasts every repeat's budget together: it is
		// long enough to time once, and repeating it would dominate the
		// run. The check's run, started together after a Barrier, is
		// that one time.
		m.repeats, m.recheck, m.once = 1, false, true
		if checkLast {
			m.times, m.netSent, m.netIters = []float64{last.Seconds()}, lastNet, 1
		}
	}
	return nil
}

// done reports whether every repeat is timed (the same on every rank).
func (m *timing) done() bool { return len(m.times) >= m.repeats }

// repeat times one repeat: a Barrier (of Spec.Sync, or the contender's
// own), then the iterations back to back.
//
// The first repeat of a chosen iteration count also checks it. A few
// warmup iterations of a small pipelined call can each catch a stall
// (4 ranks on 2 cores: the first 8-byte Broadcast of a run chose 14
// iterations where the repeat then lasted a millisecond instead of 30),
// and a repeat far shorter than the budget times a moment, not the call.
// When the slowest rank's repeat lasted under a quarter of the budget, the
// count is chosen again from that repeat (thousands of iterations, not a
// few) and the repeat is not kept.
func (m *timing) repeat() error {
	if err := m.sync.Barrier(m.ctx); err != nil {
		return err
	}
	n0, err := m.readNet()
	if err != nil {
		return err
	}
	t0 := time.Now()
	for range m.iters {
		if err := m.run(); err != nil {
			return err
		}
	}
	took := time.Since(t0).Seconds()
	// Bytes still on their way when this rank's last call returned (a
	// transport's send buffer, the qdisc, late acknowledgements) are
	// counted in the next window, or not at all after the last repeat.
	n1, err := m.readNet()
	if err != nil {
		return err
	}
	if m.recheck {
		m.recheck = false
		slowest := []float64{took}
		if err := m.c.AllReduce(m.ctx, comm.Host(slowest), comm.Host(slowest), comm.Max); err != nil {
			return err
		}
		if slowest[0] < m.s.Budget.Seconds()/4 && m.iters < MaxIters {
			m.iters = itersFor(m.s.Budget, slowest[0]/float64(m.iters))
			return nil
		}
	}
	m.times = append(m.times, took/float64(m.iters))
	m.netSent += n1 - n0
	m.netIters += m.iters
	return nil
}

// combinedQuantile is the q quantile of the repeats so far, their times
// combined over the ranks as finish will combine them: the same on every
// rank, so that every rank decides alike on it.
func (m *timing) combinedQuantile(avg Average, q float64) (float64, error) {
	times := slices.Clone(m.times)
	if err := combine(m.ctx, m.c, avg, times); err != nil {
		return 0, err
	}
	slices.Sort(times)
	return quantile(times, q), nil
}

// finish combines the ranks' times (and traffic) into the Timing.
func (m *timing) finish() error {
	c, t := m.c, m.t
	if m.s.Traffic != nil {
		per := 0.0
		if m.netIters > 0 {
			per = float64(m.netSent) / float64(m.netIters)
		}
		sum, most := []float64{per}, []float64{per}
		if err := c.AllReduce(m.ctx, comm.Host(sum), comm.Host(sum), comm.Sum); err != nil {
			return err
		}
		if err := c.AllReduce(m.ctx, comm.Host(most), comm.Host(most), comm.Max); err != nil {
			return err
		}
		t.HasNet, t.NetBytes, t.NetBytesMax = true, sum[0]/float64(c.Size()), most[0]
	}
	if err := combine(m.ctx, c, m.s.Average, m.times); err != nil {
		return err
	}
	sec := median(m.times) // sorts m.times
	t.Iters, t.Repeats = m.iters, m.repeats
	t.TimeUS = sec * 1e6
	t.LowUS, t.HighUS = quantile(m.times, 0.25)*1e6, quantile(m.times, 0.75)*1e6
	if sec > 0 {
		t.AlgBW = float64(m.bytes) / sec / 1e9
	}
	t.BusBW = t.AlgBW * m.cl.def.busFactor(float64(c.Size()))
	return nil
}

// combine replaces each rank's times by their combination over the ranks,
// the same on every rank.
func combine(ctx context.Context, c comm.Communicator, a Average, times []float64) error {
	buf := comm.Host(times)
	switch a {
	case Rank0Time:
		return c.Broadcast(ctx, buf, 0)
	case MinRanks:
		return c.AllReduce(ctx, buf, buf, comm.Min)
	case MaxRanks:
		return c.AllReduce(ctx, buf, buf, comm.Max)
	}
	if err := c.AllReduce(ctx, buf, buf, comm.Sum); err != nil {
		return err
	}
	for i := range times {
		times[i] /= float64(c.Size())
	}
	return nil
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

// quantile q (0…1) of the sorted xs, interpolated between neighbours (0
// for none).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	at := q * float64(len(sorted)-1)
	i := int(at)
	if i+1 >= len(sorted) {
		return sorted[len(sorted)-1]
	}
	return sorted[i] + (at-float64(i))*(sorted[i+1]-sorted[i])
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
