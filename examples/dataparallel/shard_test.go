package main

import (
	"math"
	"testing"
)

// TestShard: for every size from 1 to 17 ranks and every global batch
// from 0 to 300 samples (most of them not multiples of the size), the
// ranks' parts follow one another from 0 to the batch's end, so each
// sample is taken exactly once; they differ by at most one sample, the
// longer ones first; when the size divides the batch each is the equal
// share. A few are spelled out.
func TestShard(t *testing.T) {
	for _, c := range []struct {
		global, size int
		want         [][2]int
	}{
		{128, 3, [][2]int{{0, 43}, {43, 86}, {86, 128}}},
		{48, 3, [][2]int{{0, 16}, {16, 32}, {32, 48}}},
		{128, 4, [][2]int{{0, 32}, {32, 64}, {64, 96}, {96, 128}}},
		{10, 4, [][2]int{{0, 3}, {3, 6}, {6, 8}, {8, 10}}},
		{129, 2, [][2]int{{0, 65}, {65, 129}}},
		{2, 3, [][2]int{{0, 1}, {1, 2}, {2, 2}}},
	} {
		for r, w := range c.want {
			if lo, hi := shard(c.global, r, c.size); lo != w[0] || hi != w[1] {
				t.Errorf("shard(%d, %d, %d) = [%d, %d), want [%d, %d)", c.global, r, c.size, lo, hi, w[0], w[1])
			}
		}
	}
	for size := 1; size <= 17; size++ {
		for global := 0; global <= 300; global++ {
			next, prev := 0, global
			for r := range size {
				lo, hi := shard(global, r, size)
				n := hi - lo
				switch {
				case lo != next:
					t.Fatalf("shard(%d, %d, %d) starts at %d, want %d (where rank %d's ends)", global, r, size, lo, next, r-1)
				case n != global/size && n != (global+size-1)/size:
					t.Fatalf("shard(%d, %d, %d) has %d samples, want %d or %d", global, r, size, n, global/size, (global+size-1)/size)
				case n > prev:
					t.Fatalf("shard(%d, %d, %d) has %d samples, more than rank %d's %d", global, r, size, n, r-1, prev)
				case global%size == 0 && (lo != r*global/size || n != global/size):
					t.Fatalf("shard(%d, %d, %d) = [%d, %d), want the equal share [%d, %d)", global, r, size, lo, hi, r*global/size, (r+1)*global/size)
				}
				next, prev = hi, n
			}
			if next != global {
				t.Fatalf("shard(%d, ·, %d): the parts end at %d, want %d", global, size, next, global)
			}
		}
	}
}

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
				lo, hi := shard(global, r, size)
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
