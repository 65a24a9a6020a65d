package main

import "fmt"

// weight is the factor by which a rank multiplies the mean over its n
// samples of a global batch of global samples (its gradient, its loss)
// before the size ranks average them (comm.Avg), so that the average is
// the mean over the whole batch: Σ_r (n_r·size/global)·mean_r / size =
// Σ_r sum_r / global. It is n·size/global, exactly 1 when size divides
// global (every share is global/size), where multiplying by it changes
// no bit.
func weight(n, global, size int) float64 {
	return float64(n*size) / float64(global)
}

// shares says how dp.Shard splits a global batch of global samples among
// size ranks: "16 samples per rank", or "43 samples on ranks 0-1 and 42
// on rank 2".
func shares(global, size int) string {
	q, rem := global/size, global%size
	if rem == 0 {
		return fmt.Sprintf("%d samples per rank", q)
	}
	return fmt.Sprintf("%d samples on %s and %d on %s", q+1, rankRange(0, rem), q, rankRange(rem, size))
}

// rankRange names ranks lo, …, hi−1 (lo < hi).
func rankRange(lo, hi int) string {
	if hi-lo == 1 {
		return fmt.Sprintf("rank %d", lo)
	}
	return fmt.Sprintf("ranks %d-%d", lo, hi-1)
}
