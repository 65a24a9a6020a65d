package mlp

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestGradMagnitudesBoundTheTerms: GradMagnitudes is at least the sum
// over the batch of the magnitudes of each parameter's per-sample terms
// (each sample's own gradient, over the batch), so at least |g|; at the
// logits' biases, where no |W| enters, it is that sum's bound exactly:
// Σ_b (softmax + onehot)/batch. The first layer's inputs are signed and
// partly zero (its own path).
func TestGradMagnitudesBoundTheTerms(t *testing.T) {
	sizes := []int{20, 16, 12, 5}
	const batch = 8
	net, p := newNet(t, sizes, batch, 3)
	one, _ := newNet(t, sizes, 1, 3)
	r := rand.New(rand.NewPCG(8, 9))
	x := randSlice(r, batch*sizes[0])
	for i := range x {
		if i%4 == 0 {
			x[i] = 0
		}
	}
	labels := []uint8{0, 1, 2, 3, 4, 0, 1, 2}
	g, m := make([]float32, len(p)), make([]float32, len(p))
	f := Flat{Net: net, P: p, G: g}
	logits, err := net.Forward(f, x, batch)
	if err != nil {
		t.Fatal(err)
	}
	var wantBias [5]float64 // Σ_b (softmax + onehot)/batch
	for b := range batch {
		row := logits[b*5 : (b+1)*5]
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v))
		}
		for j, v := range row {
			wantBias[j] += math.Exp(float64(v)) / sum / batch
		}
		wantBias[labels[b]] += 1.0 / batch
	}
	if _, err := net.Backward(f, labels); err != nil {
		t.Fatal(err)
	}
	if err := net.GradMagnitudes(f, labels, m); err != nil {
		t.Fatal(err)
	}
	terms := make([]float64, len(p)) // Σ_b |sample b's gradient| / batch
	gb := make([]float32, len(p))
	for b := range batch {
		fb := Flat{Net: one, P: p, G: gb}
		if _, err := one.Forward(fb, x[b*sizes[0]:(b+1)*sizes[0]], 1); err != nil {
			t.Fatal(err)
		}
		if _, err := one.Backward(fb, labels[b:b+1]); err != nil {
			t.Fatal(err)
		}
		for i, v := range gb {
			terms[i] += math.Abs(float64(v)) / batch
		}
	}
	const slack = 1 + 1e-5 // m's own rounding
	for i := range p {
		if terms[i] > float64(m[i])*slack || math.Abs(float64(g[i])) > float64(m[i])*slack {
			t.Errorf("parameter %d: magnitude %g under the terms' %g or the gradient's %g", i, m[i], terms[i], g[i])
		}
	}
	off, n := net.Layout(2)
	for j, want := range wantBias {
		if got := float64(m[off+n-5+j]); math.Abs(got-want) > 1e-6*want {
			t.Errorf("bias %d of the last layer: magnitude %g, want %g", j, got, want)
		}
	}
	if err := net.GradMagnitudes(f, labels, m[1:]); err == nil {
		t.Error("GradMagnitudes accepted a vector one short")
	}
}
