package main

import (
	"context"
	"testing"

	"github.com/hiercomm/hiercomm/examples/internal/mlp"
	"github.com/hiercomm/hiercomm/examples/internal/trainer"
)

// TestBucketsAreRangesInPlace: for a large cap, the default, a bucket per
// layer and the tests' caps, every bucket is consecutive layers in
// backward order (together all of them, each once), reduced in place on
// its range of the flat gradient: no packing copy, so a bucket's
// AllReduce is the in-place AllReduce of that range, bit for bit.
func TestBucketsAreRangesInPlace(t *testing.T) {
	net, err := mlp.New([]int{784, 1024, 256, 128, 10}, 8)
	if err != nil {
		t.Fatal(err)
	}
	grad, err := (*trainer.Device)(nil).Vector(net.NumParams())
	if err != nil {
		t.Fatal(err)
	}
	for _, capBytes := range []int{64 << 20, 1 << 20, 1, 10 << 10, 4 << 10} {
		r, err := newReducer(context.Background(), nil, net, grad, capBytes)
		if err != nil {
			t.Fatal(err)
		}
		next := net.Layers() - 1 // the next layer a bucket must end with
		for _, b := range r.red.Buckets() {
			if b.Packed || b.Last != next || b.First > b.Last {
				t.Fatalf("cap %d: bucket %v, want layers ..%d in place", capBytes, b, next)
			}
			lo, _ := net.Layout(b.First)
			off, n := net.Layout(b.Last)
			if b.Len != off+n-lo {
				t.Fatalf("cap %d: bucket %v holds %d elements, want layers %d-%d's %d", capBytes, b, b.Len, b.First, b.Last, off+n-lo)
			}
			next = b.First - 1
		}
		if next != -1 {
			t.Fatalf("cap %d: buckets %v leave layers 0-%d out", capBytes, r.buckets(), next)
		}
	}
}
