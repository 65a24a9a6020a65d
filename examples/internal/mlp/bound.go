package mlp

import (
	"fmt"
	"math"
)

// GradMagnitudes writes into m (NumParams elements, the flat layout) the
// magnitude of what the last Backward added up for each parameter: the
// backward pass run again on absolute values. At the logits it starts
// from (softmax + onehot(label))/batch, which bounds both the gradient
// there and the terms it is computed from (softmax/batch and 1/batch);
// each layer's input gradient is its output's through |W| and the same
// ReLU masks as the forward's; a weight's entry is Σ_b |x_b|·δ̃_b and a
// bias's Σ_b δ̃_b, where the gradient has Σ_b x_b·δ_b and Σ_b δ_b.
//
// So m bounds what float32 rounding can do to the gradient: |g| ≤ m, and
// any evaluation that adds the same per-sample terms in another order,
// or perturbs each term relatively by k units in the last place, moves a
// gradient element by at most about (number of additions + k)·2⁻²⁴·m
// (the data-parallel check's bound, examples/internal/trainer). It must
// follow Backward on the same batch and parameters, before the next
// Forward (it reads the forward's activations and overwrites Backward's
// working memory); it computes as much as a Backward.
func (n *Net) GradMagnitudes(p Params, labels []uint8, m []float32) error {
	batch := n.batch
	if len(labels) != batch || len(m) != n.NumParams() {
		return fmt.Errorf("%w: %d labels and %d magnitudes for a batch of %d and %d parameters", ErrBatch, len(labels), len(m), batch, n.NumParams())
	}
	err := n.softmax(labels, func(y int, _, d []float32, _ float32, sum float64) {
		for j := range d {
			s := float64(d[j]) / sum
			if j == y {
				s++
			}
			d[j] = float32(s / float64(batch))
		}
	})
	if err != nil {
		return err
	}
	for l := n.Layers() - 1; l >= 0; l-- {
		in, out := n.sizes[l], n.sizes[l+1]
		dz, x := n.dz[:batch*out], n.acts[l][:batch*in]
		off, size := n.Layout(l)
		if l == 0 {
			ax := n.ta[:batch*in] // the inputs' magnitudes
			for i, v := range x {
				ax[i] = absf(v)
			}
			n.layerGrad(l, ax, dz, m[off:off+size])
			break
		}
		// x ≥ 0 here (a ReLU's output): the terms' magnitudes as they are.
		n.layerGrad(l, x, dz, m[off:off+size])
		n.inputGrad(p, l, x, dz, true)
		n.dz, n.da = n.da, n.dz
	}
	return nil
}

func absf(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }
