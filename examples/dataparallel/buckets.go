package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/dp"
	"github.com/hiercomm/hiercomm/examples/internal/mlp"
	"github.com/hiercomm/hiercomm/examples/internal/trainer"
)

// Gradient buckets, as torch's DistributedDataParallel makes them, are
// dp.Reducer's: each layer's gradient is one of its gradients, listed in
// the net's order, so the buckets take the layers in the order backward
// finishes them (last layer first) and close before the layer that would
// take them past the cap (a layer larger than the cap gets a bucket of
// its own): a large cap makes one bucket of everything (nothing to
// overlap: the AllReduce starts when backward ends) and a small one a
// bucket per layer. The layers are views of the net's flat gradient
// vector (dp.Options.Flat), so a bucket of consecutive layers is one
// contiguous range of it, and its AllReduce runs in place there: no
// packing copy, on the device too.

// reducer marks each layer's gradient Ready (its bucket's AllReduce, Avg:
// the mean gradient over the ranks, starts once the bucket is complete)
// as soon as backward has written it, and waits for them all before the
// optimizer step. It is the Params hook of one step.
//
// With -device the gradient's device copy is where the AllReduces run:
// a layer is copied there when backward has written it, just before it is
// marked Ready (so the copy is part of backward's time), and fetch copies
// the reduced gradient back for the optimizer.
type reducer struct {
	ctx   context.Context
	c     comm.Communicator
	net   *mlp.Net
	grad  *trainer.Vector
	red   *dp.Reducer
	first int       // the first layer reduced: 0, or 1 with faultMissing (fault.go)
	err   error     // the first copy that failed this step
	stale []float32 // faultStale's previous gradient (fault.go)
}

// newReducer makes the reducer of grad, the flat gradient of net, in
// buckets of about bucketBytes.
func newReducer(ctx context.Context, c comm.Communicator, net *mlp.Net, grad *trainer.Vector, bucketBytes int) (*reducer, error) {
	r := &reducer{ctx: ctx, c: c, net: net, grad: grad, first: firstReduced()}
	var grads []comm.Buffer
	for l := r.first; l < net.Layers(); l++ {
		off, n := net.Layout(l)
		grads = append(grads, grad.Buf(off, n))
	}
	red, err := dp.NewReducer(c, grads, dp.Options{BucketBytes: bucketBytes, Op: reduceOp(), Flat: grad.Buf(0, grad.Len())})
	if err != nil {
		return nil, err
	}
	r.red = red
	return r, nil
}

// buckets names the buckets by their layers, in the order their
// AllReduces start.
func (r *reducer) buckets() []string {
	var out []string
	for _, b := range r.red.Buckets() {
		s := fmt.Sprintf("layers %d-%d (%s)", b.First+r.first, b.Last+r.first, mib(b.Bytes()))
		if b.First == b.Last {
			s = fmt.Sprintf("layer %d (%s)", b.First+r.first, mib(b.Bytes()))
		}
		out = append(out, s)
	}
	return out
}

func mib(bytes int) string { return fmt.Sprintf("%.2f MiB", float64(bytes)/(1<<20)) }

// ready is mlp.Params' GradReady: layer l's gradient is written.
func (r *reducer) ready(l int) {
	if l < r.first {
		return
	}
	// A layer whose copy failed is reduced all the same, so the ranks'
	// collectives stay matched; wait reports the failure.
	off, n := r.net.Layout(l)
	if err := r.grad.Put(off, n); err != nil && r.err == nil {
		r.err = fmt.Errorf("layer %d: %w", l, err)
	}
	r.red.Ready(r.ctx, l-r.first)
}

// wait waits for every bucket of this step.
func (r *reducer) wait() error {
	first := r.err
	if err := r.red.Wait(); err != nil && first == nil {
		first = err
	}
	r.err = nil
	return first
}

// fetch copies the reduced gradient back where the optimizer reads it
// (with -device; nothing on host memory).
func (r *reducer) fetch() error {
	for l := r.first; l < r.net.Layers(); l++ {
		off, n := r.net.Layout(l)
		if err := r.grad.Get(off, n); err != nil {
			return fmt.Errorf("layer %d: %w", l, err)
		}
	}
	r.corrupt()
	return nil
}

// commAlone measures how long the step's AllReduces take with nothing
// else running: after a Barrier (so no rank waits for another's compute),
// every bucket started in backward order, then all waited for; the median
// of reps runs after one warm-up. With -device they run on the device
// copy as it is, and no copy is timed: this is the communication alone.
// The gradient's contents are destroyed. Every rank must call it at the
// same point.
func (r *reducer) commAlone(reps int) (time.Duration, error) {
	var took []time.Duration
	for i := range reps + 1 {
		if err := r.c.Barrier(r.ctx); err != nil {
			return 0, err
		}
		start := time.Now()
		if err := r.red.AllReduce(r.ctx); err != nil {
			return 0, err
		}
		if i > 0 {
			took = append(took, time.Since(start))
		}
	}
	slices.Sort(took)
	return took[len(took)/2], nil
}
