// Package mlp is the model the example trainers share: a multi-layer
// perceptron (fully connected layers, ReLU between them, softmax
// cross-entropy at the end) with its forward and backward passes and two
// optimizers (SGD with momentum, Adam), written plainly in Go on float32
// slices. It imports nothing of ours: the trainers decide where
// parameters and gradients live and when they move (see Params).
//
// All parameters are one flat vector, layer after layer (Layout); layer
// l's part is its weights then its biases. The first layer's weights are
// stored input-major (row i holds the weights from input i), every other
// layer's output-major (row o holds the weights into output o, torch's
// nn.Linear layout): the first layer then skips a whole row for every
// zero input (four pixels in five of an MNIST digit are background), and
// the others read both operands of their products along rows (gemm.go).
//
// Results are deterministic: the same parameters and batch give the same
// bits whatever GOMAXPROCS is.
package mlp

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// Net is one network's shape and the working memory of its passes for
// batches of up to MaxBatch samples. A Net is not safe for concurrent use;
// its parameters are not in it (see Params).
type Net struct {
	// Workers is how many goroutines a pass may compute on; if 0, as many
	// as GOMAXPROCS. The results do not depend on it.
	Workers int

	sizes    []int // inputs, hidden widths…, outputs
	offs     []int // offs[l]: start of layer l in the flat vector; offs[L] its length
	maxBatch int
	batch    int
	acts     [][]float32 // acts[0] the input, acts[l] layer l−1's output (post-ReLU), acts[L] the logits
	dz, da   []float32   // gradient w.r.t. the current layer's output and input
	tz, ta   []float32   // transposes for the weight gradient
	tw       []float32   // a transposed weight matrix
}

// New returns a net with layer widths sizes (inputs first, outputs last;
// at least one layer) for batches of up to maxBatch samples.
func New(sizes []int, maxBatch int) (*Net, error) {
	if len(sizes) < 2 {
		return nil, fmt.Errorf("mlp: %d layer widths: want the inputs, any hidden widths, and the outputs", len(sizes))
	}
	for i, s := range sizes {
		if s < 1 {
			return nil, fmt.Errorf("mlp: layer width %d is %d: want at least 1", i, s)
		}
	}
	if maxBatch < 1 {
		return nil, fmt.Errorf("mlp: batch of %d: want at least 1 sample", maxBatch)
	}
	n := &Net{sizes: append([]int(nil), sizes...), maxBatch: maxBatch}
	widest, biggest := 0, 0
	n.offs = []int{0}
	for l := range n.Layers() {
		in, out := sizes[l], sizes[l+1]
		n.offs = append(n.offs, n.offs[l]+(in+1)*out)
		widest = max(widest, in, out)
		biggest = max(biggest, in*out)
	}
	n.acts = make([][]float32, len(sizes))
	for l, s := range sizes {
		n.acts[l] = make([]float32, maxBatch*s)
	}
	n.dz = make([]float32, maxBatch*widest)
	n.da = make([]float32, maxBatch*widest)
	n.tz = make([]float32, maxBatch*widest)
	n.ta = make([]float32, maxBatch*widest)
	n.tw = make([]float32, biggest)
	return n, nil
}

// Layers is the number of layers (of weights).
func (n *Net) Layers() int { return len(n.sizes) - 1 }

// Sizes are the layer widths New was given.
func (n *Net) Sizes() []int { return n.sizes }

// Inputs and Outputs are the widths of the first and the last layer.
func (n *Net) Inputs() int  { return n.sizes[0] }
func (n *Net) Outputs() int { return n.sizes[len(n.sizes)-1] }

// MaxBatch is the largest batch the net's working memory holds.
func (n *Net) MaxBatch() int { return n.maxBatch }

// NumParams is the length of the flat parameter vector.
func (n *Net) NumParams() int { return n.offs[len(n.offs)-1] }

// Layout is where layer l lives in the flat vector: [off, off+size).
func (n *Net) Layout(l int) (off, size int) { return n.offs[l], n.offs[l+1] - n.offs[l] }

// Init fills the flat vector p with the He (Kaiming) initialisation for
// ReLU layers, drawn from seed: weights from N(0, 2/inputs), biases 0.
func (n *Net) Init(p []float32, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x6d6c70))
	for l := range n.Layers() {
		off, size := n.Layout(l)
		in, out := n.sizes[l], n.sizes[l+1]
		std := math.Sqrt(2 / float64(in))
		w := p[off : off+in*out]
		for i := range w {
			w[i] = float32(r.NormFloat64() * std)
		}
		clear(p[off+in*out : off+size])
	}
}

// Params is how a Net reaches its parameters and puts its gradients, one
// layer at a time, so that the trainer decides where they live: all in one
// vector (Flat), or gathered from shards around each use (ZeRO-3).
//
// A pass asks for a layer just before it needs it and lets go right
// after: Layer(l) … Release(l). Backward asks for the layers last first;
// it calls Grad(l) for where to write layer l's gradient (the same layout
// as its parameters; every element is overwritten) and GradReady(l) once
// it is written, before it computes the gradient with respect to the
// layer's input (for which it asks for Layer(l)) and goes on to layer
// l−1: the moment a data-parallel trainer may start reducing it. The
// gradient is not touched after GradReady. Nothing is called
// concurrently.
type Params interface {
	Layer(l int) []float32
	Release(l int)
	Grad(l int) []float32
	GradReady(l int)
}

// Flat is Params over one flat parameter vector P and gradient vector G;
// OnGrad, if set, is called with each layer as its gradient is ready.
type Flat struct {
	Net    *Net
	P, G   []float32
	OnGrad func(l int)
}

func (f Flat) Layer(l int) []float32 { off, size := f.Net.Layout(l); return f.P[off : off+size] }
func (f Flat) Release(int)           {}
func (f Flat) Grad(l int) []float32  { off, size := f.Net.Layout(l); return f.G[off : off+size] }
func (f Flat) GradReady(l int) {
	if f.OnGrad != nil {
		f.OnGrad(l)
	}
}

// ErrBatch is returned for a batch the net cannot take.
var ErrBatch = errors.New("mlp: bad batch")

// Forward runs the batch x (batch rows of Inputs values) through the net
// and returns the logits (batch rows of Outputs values; they belong to
// the net and change with its next pass).
func (n *Net) Forward(p Params, x []float32, batch int) ([]float32, error) {
	if batch < 1 || batch > n.maxBatch || len(x) != batch*n.Inputs() {
		return nil, fmt.Errorf("%w: %d samples in %d values for a net of %d inputs and batches of up to %d", ErrBatch, batch, len(x), n.Inputs(), n.maxBatch)
	}
	n.batch = batch
	copy(n.acts[0], x)
	for l := range n.Layers() {
		w := p.Layer(l)
		n.forwardLayer(l, w)
		p.Release(l)
	}
	return n.acts[n.Layers()][:batch*n.Outputs()], nil
}

// forwardLayer computes acts[l+1] from acts[l] with layer l's parameters
// w, applying ReLU unless l is the last layer.
func (n *Net) forwardLayer(l int, w []float32) {
	in, out, batch := n.sizes[l], n.sizes[l+1], n.batch
	x, z := n.acts[l][:batch*in], n.acts[l+1][:batch*out]
	bias := w[in*out:]
	if l == 0 {
		// Input-major weights: each nonzero input adds its row.
		parallel(n.Workers, batch, 1, 2*in*out/5, func(b0, b1 int) {
			for b := b0; b < b1; b++ {
				zr := z[b*out : (b+1)*out]
				copy(zr, bias)
				for i, v := range x[b*in : (b+1)*in] {
					if v != 0 {
						axpy(v, w[i*out:(i+1)*out], zr)
					}
				}
			}
		})
	} else {
		gemmNT(n.Workers, batch, out, in, x, w[:in*out], z, out, false)
		for b := range batch {
			zr := z[b*out : (b+1)*out]
			for j, v := range bias {
				zr[j] += v
			}
		}
	}
	if l < n.Layers()-1 {
		for i, v := range z {
			if v < 0 {
				z[i] = 0
			}
		}
	}
}

// axpy adds a·x to y.
func axpy(a float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += a * v
	}
}

// Backward computes the mean softmax cross-entropy of the last Forward's
// logits against labels (one per sample, each < Outputs) and the
// gradient of that mean with respect to every parameter, layer by layer,
// last layer first, through p (see Params). It returns the loss.
func (n *Net) Backward(p Params, labels []uint8) (float64, error) {
	batch := n.batch
	if len(labels) != batch {
		return 0, fmt.Errorf("%w: %d labels for a batch of %d", ErrBatch, len(labels), batch)
	}
	loss, err := n.softmaxLoss(labels)
	if err != nil {
		return 0, err
	}
	for l := n.Layers() - 1; l >= 0; l-- {
		in, out := n.sizes[l], n.sizes[l+1]
		dz, x := n.dz[:batch*out], n.acts[l][:batch*in]
		n.layerGrad(l, x, dz, p.Grad(l))
		// The layer's gradient is complete: it may be reduced while the
		// input gradient is computed.
		p.GradReady(l)
		if l == 0 {
			break
		}
		n.inputGrad(p, l, x, dz, false)
		n.dz, n.da = n.da, n.dz
	}
	return loss, nil
}

// layerGrad writes into g layer l's gradient (weights, then biases) for
// the gradient dz with respect to its output and its input x.
func (n *Net) layerGrad(l int, x, dz, g []float32) {
	in, out, batch := n.sizes[l], n.sizes[l+1], n.batch
	gw, gb := g[:in*out], g[in*out:]
	for j := range gb {
		var s float32
		for b := range batch {
			s += dz[b*out+j]
		}
		gb[j] = s
	}
	if l == 0 {
		n.weightGradSparse(in, out, x, dz, gw)
		return
	}
	// dW = dZᵀ·X, both transposed so the kernel reads rows.
	transpose(batch, out, dz, n.tz)
	transpose(batch, in, x, n.ta)
	gemmNT(n.Workers, out, in, batch, n.tz[:out*batch], n.ta[:in*batch], gw, in, false)
}

// inputGrad writes into n.da the gradient with respect to layer l's input
// x (l > 0: the previous layer's ReLU output) for dz, its output's: dZ·W,
// through the ReLU (zero where x is); with abs, dZ·|W|.
func (n *Net) inputGrad(p Params, l int, x, dz []float32, abs bool) {
	in, out := n.sizes[l], n.sizes[l+1]
	w := p.Layer(l)
	tw := n.tw[:in*out]
	transpose(out, in, w[:in*out], tw)
	p.Release(l)
	if abs {
		for i, v := range tw {
			tw[i] = absf(v)
		}
	}
	da := n.da[:n.batch*in]
	gemmNT(n.Workers, n.batch, in, out, dz, tw, da, in, false)
	for i, a := range x {
		if a <= 0 {
			da[i] = 0
		}
	}
}

// weightGradSparse is the first layer's weight gradient (input-major):
// row i is Σ_b x[b,i]·dz[b,:], skipping zero inputs; the columns are split
// among workers so each sum runs over b in order.
func (n *Net) weightGradSparse(in, out int, x, dz, gw []float32) {
	batch := n.batch
	parallel(n.Workers, out, 16, 2*batch*in/5, func(j0, j1 int) {
		for i := range in {
			clear(gw[i*out+j0 : i*out+j1])
		}
		for b := range batch {
			d := dz[b*out+j0 : b*out+j1]
			for i, v := range x[b*in : (b+1)*in] {
				if v != 0 {
					axpy(v, d, gw[i*out+j0:i*out+j1])
				}
			}
		}
	})
}

// softmaxLoss turns the logits into the gradient of the mean
// cross-entropy with respect to them (in n.dz) and returns that mean.
func (n *Net) softmaxLoss(labels []uint8) (float64, error) {
	batch := n.batch
	var loss float64
	err := n.softmax(labels, func(y int, row, d []float32, top float32, sum float64) {
		for j := range d {
			d[j] = float32(float64(d[j])/sum) / float32(batch)
		}
		d[y] -= 1 / float32(batch)
		loss += math.Log(sum) - float64(row[y]-top)
	})
	return loss / float64(batch), err
}

// softmax checks the labels of the last Forward's batch, and for each
// sample writes exp(z − max z) of its logits z (row) into its row d of
// n.dz and calls fn with its label, the max and the sum of the exps.
func (n *Net) softmax(labels []uint8, fn func(y int, row, d []float32, top float32, sum float64)) error {
	classes := n.Outputs()
	z := n.acts[n.Layers()]
	for b, y := range labels {
		if int(y) >= classes {
			return fmt.Errorf("%w: label %d of sample %d: the net has %d outputs", ErrBatch, y, b, classes)
		}
		row, d := z[b*classes:(b+1)*classes], n.dz[b*classes:(b+1)*classes]
		top := row[0]
		for _, v := range row {
			top = max(top, v)
		}
		var sum float64
		for j, v := range row {
			e := math.Exp(float64(v - top))
			d[j] = float32(e)
			sum += e
		}
		fn(int(y), row, d, top, sum)
	}
	return nil
}

// Predict returns the most likely class of each sample of x, in
// chunks of MaxBatch samples.
func (n *Net) Predict(p Params, x []float32) ([]int, error) {
	samples := len(x) / n.Inputs()
	out := make([]int, 0, samples)
	for s := 0; s < samples; s += n.maxBatch {
		b := min(n.maxBatch, samples-s)
		z, err := n.Forward(p, x[s*n.Inputs():(s+b)*n.Inputs()], b)
		if err != nil {
			return nil, err
		}
		for i := range b {
			row := z[i*n.Outputs() : (i+1)*n.Outputs()]
			best := 0
			for j, v := range row {
				if v > row[best] {
					best = j
				}
			}
			out = append(out, best)
		}
	}
	return out, nil
}
