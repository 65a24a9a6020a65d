package main

import (
	"math"
	"testing"

	"github.com/hiercomm/hiercomm/dp"
)

// TestWeight: the ranks' means over their shards, each multiplied by its
// weight and then averaged over the ranks as comm.Avg does, are the mean
// over the whole batch; the weight is exactly 1 when the size divides the
// batch.
func TestWeight(t *testing.T) {
	for size := 1; size <= 17; size++ {
		for global := size; global <= 300; global++ {
			v := func(i int) float64 { return float64((i*7919)%103) - 51.5 }
			var sum, avg float64
			for i := range global {
				sum += v(i)
			}
			for r := range size {
				lo, hi := dp.Shard(global, r, size)
				var s float64
				for i := lo; i < hi; i++ {
					s += v(i)
				}
				w := weight(hi-lo, global, size)
				if global%size == 0 && w != 1 {
					t.Fatalf("weight(%d, %d, %d) = %v, want 1", hi-lo, global, size, w)
				}
				avg += w * (s / float64(hi-lo))
			}
			avg /= float64(size)
			if mean := sum / float64(global); math.Abs(avg-mean) > 1e-12*(1+math.Abs(mean)) {
				t.Fatalf("%d ranks, batch %d: the weighted average of the shares' means is %v, the batch's mean %v", size, global, avg, mean)
			}
		}
	}
}

// TestShares: the line after a Shrink says how the batch is split.
func TestShares(t *testing.T) {
	for _, c := range []struct {
		global, size int
		want         string
	}{
		{48, 3, "16 samples per rank"},
		{128, 3, "43 samples on ranks 0-1 and 42 on rank 2"},
		{129, 2, "65 samples on rank 0 and 64 on rank 1"},
		{130, 4, "33 samples on ranks 0-1 and 32 on ranks 2-3"},
	} {
		if got := shares(c.global, c.size); got != c.want {
			t.Errorf("shares(%d, %d) = %q, want %q", c.global, c.size, got, c.want)
		}
	}
}
