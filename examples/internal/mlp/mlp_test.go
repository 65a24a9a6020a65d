package mlp

import (
	"math"
	"math/rand/v2"
	"testing"
)

// newNet is a net of sizes for batches of up to batch and its
// parameters, initialised from seed.
func newNet(t *testing.T, sizes []int, batch int, seed uint64) (*Net, []float32) {
	t.Helper()
	net, err := New(sizes, batch)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]float32, net.NumParams())
	net.Init(p, seed)
	return net, p
}

// TestGradientMatchesFiniteDifferences checks Backward against central
// differences of the loss, for every parameter of a small net whose
// inputs include zeros (the first layer's sparse path).
func TestGradientMatchesFiniteDifferences(t *testing.T) {
	net, p := newNet(t, []int{6, 5, 4, 3}, 4, 7)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range p { // nonzero biases too
		p[i] += float32(r.NormFloat64() * 0.1)
	}
	x := randSlice(r, 4*6)
	for i := range x {
		if i%3 == 0 {
			x[i] = 0
		}
	}
	labels := []uint8{0, 2, 1, 2}
	g := make([]float32, len(p))
	flat := Flat{Net: net, P: p, G: g}
	loss := func() float64 {
		if _, err := net.Forward(flat, x, 4); err != nil {
			t.Fatal(err)
		}
		l, err := net.Backward(Flat{Net: net, P: p, G: make([]float32, len(p))}, labels)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	var order []int
	flat.OnGrad = func(l int) { order = append(order, l) }
	if _, err := net.Forward(flat, x, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Backward(flat, labels); err != nil {
		t.Fatal(err)
	}
	if len(order) != 3 || order[0] != 2 || order[2] != 0 {
		t.Fatalf("gradients became ready in layer order %v, want [2 1 0]", order)
	}
	const h = 1e-3 // small enough not to cross a ReLU kink, large enough for float32
	for i := range p {
		old := p[i]
		p[i] = old + h
		up := loss()
		p[i] = old - h
		down := loss()
		p[i] = old
		num := (up - down) / (2 * h)
		if math.Abs(num-float64(g[i])) > 2e-3+2e-2*math.Abs(num) {
			t.Errorf("parameter %d: gradient %v, finite difference %v", i, g[i], num)
		}
	}
}

// TestDeterministicAcrossWorkers checks that one pass gives the same bits
// with one goroutine and with several (what the replicas' bitwise check
// and the single-process comparison rely on).
func TestDeterministicAcrossWorkers(t *testing.T) {
	net, p := newNet(t, []int{300, 256, 128, 10}, 64, 1)
	r := rand.New(rand.NewPCG(1, 1))
	x := randSlice(r, 64*300)
	for i := range x {
		x[i] = max(x[i], 0)
	}
	labels := make([]uint8, 64)
	for i := range labels {
		labels[i] = uint8(i % 10)
	}
	grad := func(workers int) []float32 {
		net.Workers = workers
		g := make([]float32, len(p))
		f := Flat{Net: net, P: p, G: g}
		if _, err := net.Forward(f, x, 64); err != nil {
			t.Fatal(err)
		}
		if _, err := net.Backward(f, labels); err != nil {
			t.Fatal(err)
		}
		return g
	}
	one, four := grad(1), grad(4)
	for i := range one {
		if math.Float32bits(one[i]) != math.Float32bits(four[i]) {
			t.Fatalf("gradient %d: %v with 1 worker, %v with 4", i, one[i], four[i])
		}
	}
}

func TestBadArguments(t *testing.T) {
	if _, err := New([]int{3}, 1); err == nil {
		t.Error("New accepted a net without layers")
	}
	if _, err := New([]int{3, 0, 2}, 1); err == nil {
		t.Error("New accepted a layer of width 0")
	}
	net, _ := New([]int{3, 2}, 2)
	f := Flat{Net: net, P: make([]float32, net.NumParams()), G: make([]float32, net.NumParams())}
	if _, err := net.Forward(f, make([]float32, 9), 3); err == nil {
		t.Error("Forward accepted a batch over MaxBatch")
	}
	if _, err := net.Forward(f, make([]float32, 6), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Backward(f, []uint8{0, 2}); err == nil {
		t.Error("Backward accepted label 2 for a net of 2 outputs")
	}
	if _, err := NewOptimizer("adagrad", 0.1); err == nil {
		t.Error("NewOptimizer accepted adagrad")
	}
	if _, err := NewOptimizer("sgd", 0); err == nil {
		t.Error("NewOptimizer accepted learning rate 0")
	}
}
