package mlp

import (
	"fmt"
	"math"
)

// Optimizer updates parameters from their gradient, element by element:
// the update of element i reads only element i of p, g and each state
// vector, so a trainer may run it on any slice of the flat vectors (a
// ZeRO shard) and get the same bits as on the whole.
type Optimizer interface {
	// Slots is the number of state vectors the optimizer keeps per
	// parameter (SGD with momentum 1, Adam 2).
	Slots() int
	// Step applies update number t (1, 2, …) to p with gradient g and
	// state (Slots vectors, each as long as p, zero before the first
	// step).
	Step(t int, p, g []float32, state [][]float32)
}

// SGD is stochastic gradient descent with momentum, as torch.optim.SGD:
// v ← μ·v + g, p ← p − lr·v.
type SGD struct{ LR, Momentum float32 }

func (SGD) Slots() int { return 1 }

func (o SGD) Step(_ int, p, g []float32, state [][]float32) {
	v := state[0][:len(p)]
	g = g[:len(p)]
	for i := range p {
		v[i] = o.Momentum*v[i] + g[i]
		p[i] -= o.LR * v[i]
	}
}

// Adam is Kingma and Ba's Adam with bias correction, as torch.optim.Adam.
type Adam struct{ LR, Beta1, Beta2, Eps float32 }

func (Adam) Slots() int { return 2 }

func (o Adam) Step(t int, p, g []float32, state [][]float32) {
	m, v := state[0][:len(p)], state[1][:len(p)]
	g = g[:len(p)]
	c1 := float32(1 - math.Pow(float64(o.Beta1), float64(t)))
	c2 := float32(math.Sqrt(1 - math.Pow(float64(o.Beta2), float64(t))))
	step := o.LR * c2 / c1
	eps := o.Eps * c2
	for i := range p {
		m[i] = o.Beta1*m[i] + (1-o.Beta1)*g[i]
		v[i] = o.Beta2*v[i] + (1-o.Beta2)*g[i]*g[i]
		p[i] -= step * m[i] / (float32(math.Sqrt(float64(v[i]))) + eps)
	}
}

// NewOptimizer is the optimizer a trainer's flags name: "sgd" (momentum
// 0.9) or "adam" (β 0.9, 0.999, ε 1e-8), with learning rate lr.
func NewOptimizer(name string, lr float64) (Optimizer, error) {
	if !(lr > 0) {
		return nil, fmt.Errorf("learning rate %v: want a positive number", lr)
	}
	switch name {
	case "sgd":
		return SGD{LR: float32(lr), Momentum: 0.9}, nil
	case "adam":
		return Adam{LR: float32(lr), Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, nil
	}
	return nil, fmt.Errorf("optimizer %q: want sgd or adam", name)
}
