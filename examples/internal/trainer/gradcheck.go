package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/examples/internal/mlp"
)

// GradCheck is the check a user of data parallelism asks for: in each of
// the first steps, the gradient the ranks averaged (what the optimizer is
// about to apply) is the gradient one process computes of the whole
// global batch at the same weights, to within float32 rounding. Checking
// each step at the run's own weights, rather than comparing where two
// runs' trajectories end, keeps the comparison free of the optimizer: Adam
// turns a near-zero gradient element whose sign a regrouped sum flips
// into a step of about lr, so two correct trajectories part (by as much
// as a fault moves them: docs/training.md), while the gradients at the
// same weights still agree to a few units in their last place.
//
// The bound. The ranks and the one process compute the same per-sample
// terms: the forward is the same bits per sample whatever the batch (each
// product's element is one dot product in a fixed order, mlp's gemm), and
// so are the ReLU masks; the loss's 1/batch scales the terms by 1/per on a
// rank and 1/B in the one process, a factor N that is exact when N is a
// power of two. Only the sum over the B samples is grouped differently:
// the one process adds them in order, a rank adds its share in order and
// the reduction adds (and averages) the N partial sums in an order of its
// own. Any order of adding B terms t_b errs by at most (B−1)·u·Σ|t_b|
// (u = 2⁻²⁴, to first order), so the two differ by at most 2(B−1)·u·Σ|t_b|,
// and mlp's GradMagnitudes m bounds Σ|t_b|. With the average's division
// (two roundings where a hierarchy averages per tier) and the rounding of
// m itself, the bound of parameter i of layer l is
//
//	|g_ranks,i − g_one,i| ≤ c_l·u·m_i + c_l·2⁻¹⁴⁹,  c_l = 2B + 8,
//
// the last term for results in float32's subnormal range. When N is not a
// power of two, 1/per and 1/B round differently: each term at the logits
// moves by up to 3 units in the last place of its magnitude, each layer
// above l propagates that through a dot product of its width whose
// roundings then differ too, so c_l grows by 8 + 2·Σ (widths of the
// layers above l); m propagates magnitudes through |W|, so it bounds
// those too.
//
// How tight: at B = 128, c·u is 1.5e-5 of m, and the last layers' m is
// within a small factor of |g| itself, so a gradient summed instead of
// averaged (off by (N−1)·|g|), a bucket not reduced (a rank's share's
// gradient in place of the batch's), a stale one (the previous batch's)
// or one rank's samples in place of another's move some element by
// thousands of times its bound.
type GradCheck struct {
	cfg     Config
	d       *Data
	steps   int
	net     *mlp.Net // for the whole batch; made on rank 0 at its first check
	ref     []float32
	mag     []float32
	x       []float32
	y       []uint8
	worst   GradDiff // over the steps checked so far
	checked int
	took    time.Duration // rank 0's reference passes and comparisons
}

// GradDiff is how far the ranks' gradients are from one process's.
type GradDiff struct {
	Step    int     // of the element closest to (or furthest over) its bound
	Param   int     // that element, in the flat vector
	Diff    float64 // |g_ranks − g_one| there
	Bound   float64 // its bound
	Ratio   float64 // Diff/Bound: the verdict is Ratio ≤ 1
	MaxDiff float64 // the largest |g_ranks − g_one| of any element
	Over    int     // elements over their bound
}

// NewGradCheck checks the first steps steps of a run of cfg on d.
func NewGradCheck(cfg Config, d *Data, steps int) *GradCheck {
	return &GradCheck{cfg: cfg, d: d, steps: steps}
}

// Steps is how many steps the check covers.
func (c *GradCheck) Steps() int { return c.steps }

// Check is called by every rank of w in step t (0, 1, …, Steps()−1) after
// the gradient is averaged and before the optimizer step. On rank 0, p
// is the weights the step's gradients were computed at (every replica's:
// check that apart) and g the averaged gradient, whole; other ranks may
// pass nil. Rank 0 computes the whole global batch's gradient at p and
// compares; every rank returns its verdict (one Broadcast).
func (c *GradCheck) Check(ctx context.Context, w comm.Communicator, t int, p, g []float32) error {
	var err error
	if w.Rank() == 0 {
		start := time.Now()
		var diff GradDiff
		diff, err = c.compare(t, w.Size(), p, g)
		c.took += time.Since(start)
		if err == nil {
			mx := max(c.worst.MaxDiff, diff.MaxDiff)
			if c.checked == 0 || diff.Ratio > c.worst.Ratio {
				c.worst = diff
			}
			c.worst.MaxDiff = mx
			c.checked++
		}
		if err == nil && diff.Over > 0 {
			err = fmt.Errorf("the gradient the %d ranks averaged in step %d is not one process's at the same weights: %d of its %d elements differ by more than float32 rounding allows, the worst (%s) by %.3g against a bound of %.3g",
				w.Size(), t+1, diff.Over, len(g), c.where(diff.Param), diff.Diff, diff.Bound)
		}
	}
	return Verdict(ctx, w, err)
}

// Summary is rank 0's line after the last check ("" on the other ranks).
func (c *GradCheck) Summary(ranks int) string {
	if c.net == nil {
		return ""
	}
	w := c.worst
	return fmt.Sprintf("gradient check, steps 1-%d: the %d ranks' averaged gradient against one process's of the whole global batch at rank 0's weights (%v): max |Δg| %.2e; closest to its float32 bound: %s of step %d, |Δg| %.2e ≤ %.2e (%.3f of it); every element within its bound: yes",
		c.steps, ranks, c.took.Round(time.Millisecond), w.MaxDiff, c.where(w.Param), w.Step+1, w.Diff, w.Bound, w.Ratio)
}

// where names parameter i: its layer and its index there.
func (c *GradCheck) where(i int) string {
	for l := range c.net.Layers() {
		if off, n := c.net.Layout(l); i < off+n {
			return fmt.Sprintf("layer %d element %d", l, i-off)
		}
	}
	return fmt.Sprintf("element %d", i)
}

// compare computes the reference gradient of global batch t at p and its
// magnitudes, and measures g against them for a world of ranks.
func (c *GradCheck) compare(t, ranks int, p, g []float32) (GradDiff, error) {
	if c.net == nil {
		net, err := mlp.New(c.cfg.Sizes(), c.cfg.Batch)
		if err != nil {
			return GradDiff{}, err
		}
		c.net, c.ref, c.mag = net, make([]float32, net.NumParams()), make([]float32, net.NumParams())
		c.x, c.y = make([]float32, c.cfg.Batch*net.Inputs()), make([]uint8, c.cfg.Batch)
	}
	if len(p) != len(c.ref) || len(g) != len(c.ref) {
		return GradDiff{}, fmt.Errorf("gradient check: %d weights and %d gradient elements for a net of %d parameters", len(p), len(g), len(c.ref))
	}
	var idx []int
	for s := range c.d.Batches(0, 1) {
		if s.T == t {
			idx = s.Idx
			break
		}
	}
	if idx == nil {
		return GradDiff{}, fmt.Errorf("gradient check: step %d is past the run's %d", t+1, c.d.TotalSteps())
	}
	c.d.Train.Batch(idx, c.x, c.y)
	flat := mlp.Flat{Net: c.net, P: p, G: c.ref}
	if _, err := c.net.Forward(flat, c.x, len(idx)); err != nil {
		return GradDiff{}, err
	}
	if _, err := c.net.Backward(flat, c.y); err != nil {
		return GradDiff{}, err
	}
	if err := c.net.GradMagnitudes(flat, c.y, c.mag); err != nil {
		return GradDiff{}, err
	}
	d := GradDiff{Step: t, Param: -1}
	const u, tiny = 0x1p-24, 0x1p-149
	for l := range c.net.Layers() {
		k := c.bound(l, ranks)
		off, n := c.net.Layout(l)
		for i := off; i < off+n; i++ {
			diff := math.Abs(float64(g[i]) - float64(c.ref[i]))
			bound := k * (u*float64(c.mag[i]) + tiny)
			r := diff / bound
			if diff == 0 {
				r = 0
			}
			if math.IsNaN(diff) {
				r = math.Inf(1)
			}
			d.MaxDiff = max(d.MaxDiff, diff)
			if r > 1 {
				d.Over++
			}
			if d.Param < 0 || r > d.Ratio {
				d.Param, d.Diff, d.Bound, d.Ratio = i, diff, bound, r
			}
		}
	}
	return d, nil
}

// bound is c_l of layer l for a world of ranks (see GradCheck).
func (c *GradCheck) bound(l, ranks int) float64 {
	k := 2*c.cfg.Batch + 8
	if bits.OnesCount(uint(ranks)) != 1 {
		k += 8
		for _, w := range c.net.Sizes()[l+2:] {
			k += 2 * w
		}
	}
	return float64(k)
}

// Verdict makes rank 0's verdict every rank's: rank 0 passes what it
// found (nil: the check holds), the others nil; each returns rank 0's
// error there, an error that points to rank 0's log elsewhere, or the
// Broadcast's failure. Every rank of w must call it at the same point.
func Verdict(ctx context.Context, w comm.Communicator, err error) error {
	v := []int64{0}
	if err != nil {
		v[0] = 1
	}
	if berr := w.Broadcast(ctx, comm.Host(v), 0); berr != nil {
		return errors.Join(err, berr)
	}
	if err == nil && v[0] != 0 {
		err = errors.New("rank 0 found that the run differs from one process (see its log)")
	}
	return err
}
