package dp

import "testing"

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
			if lo, hi := Shard(c.global, r, c.size); lo != w[0] || hi != w[1] {
				t.Errorf("Shard(%d, %d, %d) = [%d, %d), want [%d, %d)", c.global, r, c.size, lo, hi, w[0], w[1])
			}
		}
	}
	for size := 1; size <= 17; size++ {
		for global := 0; global <= 300; global++ {
			next, prev := 0, global
			for r := range size {
				lo, hi := Shard(global, r, size)
				n := hi - lo
				switch {
				case lo != next:
					t.Fatalf("Shard(%d, %d, %d) starts at %d, want %d (where rank %d's ends)", global, r, size, lo, next, r-1)
				case n != global/size && n != (global+size-1)/size:
					t.Fatalf("Shard(%d, %d, %d) has %d samples, want %d or %d", global, r, size, n, global/size, (global+size-1)/size)
				case n > prev:
					t.Fatalf("Shard(%d, %d, %d) has %d samples, more than rank %d's %d", global, r, size, n, r-1, prev)
				case global%size == 0 && (lo != r*global/size || n != global/size):
					t.Fatalf("Shard(%d, %d, %d) = [%d, %d), want the equal share [%d, %d)", global, r, size, lo, hi, r*global/size, (r+1)*global/size)
				}
				next, prev = hi, n
			}
			if next != global {
				t.Fatalf("Shard(%d, ·, %d): the parts end at %d, want %d", global, size, next, global)
			}
		}
	}
}
