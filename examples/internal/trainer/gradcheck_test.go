package trainer

import (
	"math/rand/v2"
	"testing"

	"github.com/hiercomm/hiercomm/dp/mnist"
	"github.com/hiercomm/hiercomm/examples/internal/mlp"
)

// TestGradCheckBound: N ranks simulated in one process (each the
// gradient of its share, the shares' gradients added in rank order and
// divided by N, as a ring's Avg does) are within GradCheck's bound of one
// process for N = 2, 3 (not a power of two: the bound's wider form) and
// 4, at every one of several steps' weights; the same run with the
// gradients summed instead of averaged, or with one rank's share counted
// twice and another's not at all, is not.
func TestGradCheckBound(t *testing.T) {
	c := Defaults()
	c.Batch, c.Hidden, c.Epochs = 12, []int{32, 16}, 1
	r := rand.New(rand.NewPCG(4, 2))
	set := &mnist.Set{Images: make([]float32, 48*mnist.Pixels), Labels: make([]uint8, 48)}
	for i := range set.Images {
		if r.IntN(5) == 0 { // four pixels in five are background
			set.Images[i] = r.Float32()
		}
	}
	for i := range set.Labels {
		set.Labels[i] = uint8(r.IntN(mnist.Classes))
	}
	d := &Data{Train: set, cfg: c}
	net, err := mlp.New(c.Sizes(), c.Batch)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]float32, net.NumParams())
	net.Init(p, 1)
	check := NewGradCheck(c, d, d.TotalSteps())
	// reduce is the ranks' reduced gradient of step step: share(r) is the
	// share rank r takes, sum whether the reduction forgets to divide.
	reduce := func(step, size int, share func(int) int, sum bool) []float32 {
		per := c.Batch / size
		rank, err := mlp.New(c.Sizes(), per)
		if err != nil {
			t.Fatal(err)
		}
		g, gr := make([]float32, len(p)), make([]float32, len(p))
		x, y := make([]float32, per*mnist.Pixels), make([]uint8, per)
		for k := range size {
			for s := range d.Batches(share(k), size) {
				if s.T == step {
					set.Batch(s.Idx, x, y)
					break
				}
			}
			f := mlp.Flat{Net: rank, P: p, G: gr}
			if _, err := rank.Forward(f, x, per); err != nil {
				t.Fatal(err)
			}
			if _, err := rank.Backward(f, y); err != nil {
				t.Fatal(err)
			}
			for i, v := range gr {
				g[i] += v
			}
		}
		if !sum {
			for i := range g {
				g[i] /= float32(size)
			}
		}
		return g
	}
	own := func(r int) int { return r }
	for step := range d.TotalSteps() {
		for _, size := range []int{2, 3, 4} {
			diff, err := check.compare(step, size, p, reduce(step, size, own, false))
			if err != nil {
				t.Fatal(err)
			}
			if diff.Over > 0 || diff.Ratio > 1 {
				t.Errorf("step %d, %d ranks, correct: %d elements over their bound, the worst %v (%v of its bound %v)", step, size, diff.Over, diff.Diff, diff.Ratio, diff.Bound)
			}
			t.Logf("step %d, %d ranks: max |Δg| %.2e, at most %.3f of the bound", step+1, size, diff.MaxDiff, diff.Ratio)
			for name, g := range map[string][]float32{
				"summed":               reduce(step, size, own, true),
				"rank 0's share twice": reduce(step, size, func(r int) int { return r &^ 1 }, false),
			} {
				if diff, err := check.compare(step, size, p, g); err != nil || diff.Over == 0 {
					t.Errorf("step %d, %d ranks, %s: %v, %d elements over their bound", step, size, name, err, diff.Over)
				}
			}
		}
		// The next step's weights: any point will do, as long as it moves.
		for i := range p {
			p[i] -= 0.05 * check.ref[i]
		}
	}
}
