package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/examples/internal/mlp"
	"github.com/hiercomm/hiercomm/examples/internal/trainer"
)

// Gradient buckets, as torch's DistributedDataParallel makes them: the
// layers in the order backward finishes them (last layer first), packed
// into buckets of about bucketBytes. Because the net's flat gradient
// vector holds layer after layer, a bucket of consecutive layers is one
// contiguous range of it, and its AllReduce runs in place there: no
// packing copy. A bucket closes before the layer that would take it past
// the cap (a layer larger than the cap gets a bucket of its own), so a
// large cap makes one bucket of everything (nothing to overlap: the
// AllReduce starts when backward ends) and a small one a bucket per
// layer.
type bucket struct {
	first, last int // layers first..last (first ≤ last); ready when first is
	off, n      int // elements [off, off+n) of the flat gradient
}

// planBuckets lays out the buckets of net for a cap of bucketBytes, in
// the order their AllReduces start.
func planBuckets(net *mlp.Net, bucketBytes int) []bucket {
	var out []bucket
	for l := net.Layers() - 1; l >= 0; l-- {
		off, n := net.Layout(l)
		if k := len(out) - 1; k >= 0 && 4*(out[k].n+n) <= bucketBytes {
			out[k].first, out[k].off, out[k].n = l, off, out[k].n+n
			continue
		}
		out = append(out, bucket{first: l, last: l, off: off, n: n})
	}
	return out
}

func (b bucket) String() string {
	if b.first == b.last {
		return fmt.Sprintf("layer %d (%s)", b.first, mib(4*b.n))
	}
	return fmt.Sprintf("layers %d-%d (%s)", b.first, b.last, mib(4*b.n))
}

func mib(bytes int) string { return fmt.Sprintf("%.2f MiB", float64(bytes)/(1<<20)) }

// reducer starts each bucket's AllReduce (Avg: the mean gradient over the
// ranks) as soon as backward has written its layers, and waits for them
// all before the optimizer step. It is the Params hook of one step.
//
// With -device the gradient's device copy is where the AllReduces run:
// a bucket is copied there when backward has written it, just before its
// AllReduce starts (so the copy is part of backward's time), and fetch
// copies the reduced buckets back for the optimizer.
type reducer struct {
	ctx     context.Context
	c       comm.Communicator
	grad    *trainer.Vector
	buckets []bucket
	works   []*comm.Work
	err     error     // the first copy that failed this step
	stale   []float32 // faultStale's previous gradient (fault.go)
}

// ready is mlp.Params' GradReady: layer l's gradient is written.
func (r *reducer) ready(l int) {
	for i, b := range r.buckets {
		if b.first == l && !r.skips(i) {
			// A bucket whose copy failed is reduced all the same, so the
			// ranks' collectives stay matched; wait reports the failure.
			if err := r.grad.Put(b.off, b.n); err != nil && r.err == nil {
				r.err = fmt.Errorf("bucket %v: %w", b, err)
			}
			r.start(b)
		}
	}
}

// start starts bucket b's AllReduce, in place.
func (r *reducer) start(b bucket) {
	g := r.grad.Buf(b.off, b.n)
	r.works = append(r.works, comm.StartAllReduce(r.ctx, r.c, g, g, reduceOp()))
}

// wait waits for every bucket started in this step.
func (r *reducer) wait() error {
	first := r.err
	for i, w := range r.works {
		if err := w.Wait(); err != nil && first == nil {
			first = fmt.Errorf("AllReduce of bucket %d, %v: %w", i, r.buckets[i], err)
		}
	}
	r.works, r.err = r.works[:0], nil
	return first
}

// fetch copies the reduced gradient back where the optimizer reads it
// (with -device; nothing on host memory).
func (r *reducer) fetch() error {
	for _, b := range r.buckets {
		if err := r.grad.Get(b.off, b.n); err != nil {
			return fmt.Errorf("bucket %v: %w", b, err)
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
		for _, b := range r.buckets {
			r.start(b)
		}
		if err := r.wait(); err != nil {
			return 0, err
		}
		if i > 0 {
			took = append(took, time.Since(start))
		}
	}
	slices.Sort(took)
	return took[len(took)/2], nil
}
