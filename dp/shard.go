package dp

// Shard is the part of a global batch of global samples that rank takes in
// a world of size ranks (0 ≤ rank < size): samples [lo, hi) of the batch.
// The parts of ranks 0, 1, …, size−1 follow one another and cover
// [0, global), so each sample of the batch is taken by exactly one rank
// whatever size is, after a Shrink too. The first global mod size ranks take
// ⌈global/size⌉ samples and the others ⌊global/size⌋, so two ranks' shares
// differ by at most one (and none is empty when global ≥ size). When size
// divides global, rank r takes the r-th of size equal parts.
//
// Where the shares differ, a rank's mean over its share is not a sample of
// the batch's mean: multiply it by n·size/global (n = hi − lo) before
// averaging across ranks, and the average is the batch's mean.
func Shard(global, rank, size int) (lo, hi int) {
	q, rem := global/size, global%size
	lo = rank*q + min(rank, rem)
	hi = lo + q
	if rank < rem {
		hi++
	}
	return lo, hi
}
