package mlp

import (
	"runtime"
	"sync"
)

// The one matrix product the network needs, in the form that reads both
// operands along contiguous rows: C = A·Bᵀ, with A m×k and B n×k row-major,
// C m×n (row stride ldc). Every product of the forward and backward passes
// is put in this form (transposing the smaller operand where needed), so
// there is one kernel to make fast.
//
// Each element of C is one dot product accumulated in a single float32 in
// the order p = 0, 1, …, k−1, whatever the tiling and however many
// goroutines share the work: the result is the same bits on every machine
// and for every GOMAXPROCS, which the data-parallel check (every replica
// bitwise identical) and the single-process comparison rely on.

// jBlock is how many rows of B a tile pass keeps hot (64 rows of a
// 1024-wide layer are 256 KiB, an L2's worth).
const jBlock = 64

// gemmNT sets C[i*ldc+j] = Σ_p A[i*k+p]·B[j*k+p] for i < m, j < n (adds
// to C instead when acc), splitting the rows of C among workers.
func gemmNT(workers, m, n, k int, a, b, c []float32, ldc int, acc bool) {
	parallel(workers, m, 4, 2*n*k, func(i0, i1 int) { gemmNTRows(i0, i1, n, k, a, b, c, ldc, acc) })
}

// gemmNTRows is gemmNT for the rows [i0, i1) of C.
func gemmNTRows(i0, i1, n, k int, a, b, c []float32, ldc int, acc bool) {
	for j0 := 0; j0 < n; j0 += jBlock {
		j1 := min(j0+jBlock, n)
		i := i0
		for ; i+4 <= i1; i += 4 {
			a0 := a[i*k : (i+1)*k]
			a1 := a[(i+1)*k : (i+2)*k]
			a2 := a[(i+2)*k : (i+3)*k]
			a3 := a[(i+3)*k : (i+4)*k]
			j := j0
			for ; j+2 <= j1; j += 2 {
				var c00, c01, c10, c11, c20, c21, c30, c31 float32
				b0 := b[j*k : (j+1)*k]
				b1 := b[(j+1)*k : (j+2)*k]
				b1, a0, a1, a2, a3 := b1[:len(b0)], a0[:len(b0)], a1[:len(b0)], a2[:len(b0)], a3[:len(b0)]
				for p, x0 := range b0 {
					x1 := b1[p]
					y := a0[p]
					c00 += y * x0
					c01 += y * x1
					y = a1[p]
					c10 += y * x0
					c11 += y * x1
					y = a2[p]
					c20 += y * x0
					c21 += y * x1
					y = a3[p]
					c30 += y * x0
					c31 += y * x1
				}
				put(c, i*ldc+j, c00, acc)
				put(c, i*ldc+j+1, c01, acc)
				put(c, (i+1)*ldc+j, c10, acc)
				put(c, (i+1)*ldc+j+1, c11, acc)
				put(c, (i+2)*ldc+j, c20, acc)
				put(c, (i+2)*ldc+j+1, c21, acc)
				put(c, (i+3)*ldc+j, c30, acc)
				put(c, (i+3)*ldc+j+1, c31, acc)
			}
			for ; j < j1; j++ {
				for r := range 4 {
					put(c, (i+r)*ldc+j, dot(a[(i+r)*k:(i+r+1)*k], b[j*k:(j+1)*k]), acc)
				}
			}
		}
		for ; i < i1; i++ {
			for j := j0; j < j1; j++ {
				put(c, i*ldc+j, dot(a[i*k:(i+1)*k], b[j*k:(j+1)*k]), acc)
			}
		}
	}
}

// put stores (or, with acc, adds) v at c[at].
func put(c []float32, at int, v float32, acc bool) {
	if acc {
		c[at] += v
	} else {
		c[at] = v
	}
}

// dot is Σ_p x[p]·y[p] accumulated in order, as the tiles do.
func dot(x, y []float32) float32 {
	y = y[:len(x)]
	var s float32
	for p, v := range x {
		s += v * y[p]
	}
	return s
}

// transpose writes the n×m transpose of the m×n matrix a into t.
func transpose(m, n int, a, t []float32) {
	const blk = 32
	for i0 := 0; i0 < m; i0 += blk {
		for j0 := 0; j0 < n; j0 += blk {
			for i := i0; i < min(i0+blk, m); i++ {
				row := a[i*n : (i+1)*n]
				for j := j0; j < min(j0+blk, n); j++ {
					t[j*m+i] = row[j]
				}
			}
		}
	}
}

// minWork is the number of flops below which splitting a product among
// goroutines costs more than it saves.
const minWork = 1 << 18

// parallel runs fn over [0, n) cut into at most workers (0: GOMAXPROCS)
// contiguous pieces whose starts are multiples of align, each costing
// about perItem·(its length) flops; small jobs run on the caller's
// goroutine. The pieces are disjoint, so fn may write what its range owns.
func parallel(workers, n, align, perItem int, fn func(lo, hi int)) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, n/align, n*perItem/minWork)
	if workers <= 1 {
		fn(0, n)
		return
	}
	per := (n/workers + align - 1) / align * align
	var wg sync.WaitGroup
	for lo := per; lo < n; lo += per {
		wg.Go(func() { fn(lo, min(lo+per, n)) })
	}
	fn(0, min(per, n))
	wg.Wait()
}
