//go:build !purego

package tier

import "github.com/hiercomm/hiercomm/comm"

// AVX2 kernels (reduce_amd64.s), used where the CPU and the OS support AVX2
// (checked once, at start). The scalar loops of reduce.go are ALU-bound at
// about one element per cycle — slower than memory, so they were the limit
// of every reducing collective on the host; eight f32 lanes per instruction
// make the kernels memory-bound.
//
// A vector kernel gives the same bits as the scalar one: each lane is the
// same IEEE operation (round to nearest even; MXCSR is Go's default, no
// flush to zero) or the same integer operation, and the float Min and Max
// compare the same keys. The one freedom IEEE leaves, which NaN a Sum or
// Prod of two NaNs returns, the float kernels take one way on every
// element: dst's, quieted (the first source of VADDPS and VADDSS alike),
// where the Go loops give whichever operand the compiler happened to put
// first (it differs between the elements of an unrolled group, and between
// builds). TestVectorKernelsMatchScalar checks every pair against the
// scalar kernel. The build tag purego turns them off.
//
// f16 and bf16 keep their scalar kernels, as do the 64-bit integer Prod,
// Min and Max (AVX2 has no such instructions).

//go:noescape
func addF32AVX2(d, s *byte, n int)

//go:noescape
func addF64AVX2(d, s *byte, n int)

//go:noescape
func mulF32AVX2(d, s *byte, n int)

//go:noescape
func mulF64AVX2(d, s *byte, n int)

//go:noescape
func addI8AVX2(d, s *byte, n int)

//go:noescape
func addI32AVX2(d, s *byte, n int)

//go:noescape
func addI64AVX2(d, s *byte, n int)

//go:noescape
func mulI32AVX2(d, s *byte, n int)

//go:noescape
func minI8AVX2(d, s *byte, n int)

//go:noescape
func maxI8AVX2(d, s *byte, n int)

//go:noescape
func minU8AVX2(d, s *byte, n int)

//go:noescape
func maxU8AVX2(d, s *byte, n int)

//go:noescape
func minI32AVX2(d, s *byte, n int)

//go:noescape
func maxI32AVX2(d, s *byte, n int)

//go:noescape
func minU32AVX2(d, s *byte, n int)

//go:noescape
func maxU32AVX2(d, s *byte, n int)

//go:noescape
func minMaxF32AVX2(d, s *byte, n int, flip int32)

//go:noescape
func minMaxF64AVX2(d, s *byte, n int, flip int64)

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

func xgetbv0() (eax uint32)

// hasAVX2 reports whether the CPU has AVX2 and the OS saves the YMM
// registers (OSXSAVE, and XCR0's SSE and AVX state bits).
func hasAVX2() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const osxsave, avx = 1 << 27, 1 << 28
	if ecx1&osxsave == 0 || ecx1&avx == 0 || xgetbv0()&6 != 6 {
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&(1<<5) != 0
}

// vectorKernels is scalar with the AVX2 kernels in place where the machine
// has them.
func vectorKernels(scalar kernelTable) kernelTable {
	k := scalar
	if !hasAVX2() {
		return k
	}
	k[comm.F32][comm.Sum] = whole(comm.F32, addF32AVX2)
	k[comm.F32][comm.Prod] = whole(comm.F32, mulF32AVX2)
	k[comm.F32][comm.Min] = vectorized(comm.F32, func(d, s *byte, n int) { minMaxF32AVX2(d, s, n, 0) }, func(d, s []uint32) { minMax32(d, s, 0) })
	k[comm.F32][comm.Max] = vectorized(comm.F32, func(d, s *byte, n int) { minMaxF32AVX2(d, s, n, -1) }, func(d, s []uint32) { minMax32(d, s, -1) })
	k[comm.F64][comm.Sum] = whole(comm.F64, addF64AVX2)
	k[comm.F64][comm.Prod] = whole(comm.F64, mulF64AVX2)
	k[comm.F64][comm.Min] = vectorized(comm.F64, func(d, s *byte, n int) { minMaxF64AVX2(d, s, n, 0) }, func(d, s []uint64) { minMax64(d, s, 0) })
	k[comm.F64][comm.Max] = vectorized(comm.F64, func(d, s *byte, n int) { minMaxF64AVX2(d, s, n, -1) }, func(d, s []uint64) { minMax64(d, s, -1) })
	for _, dt := range []comm.DType{comm.I8, comm.U8} {
		k[dt][comm.Sum] = vectorized(dt, addI8AVX2, sumBytes)
	}
	k[comm.I8][comm.Min] = vectorized(comm.I8, minI8AVX2, minLoop[int8])
	k[comm.I8][comm.Max] = vectorized(comm.I8, maxI8AVX2, maxLoop[int8])
	k[comm.U8][comm.Min] = vectorized(comm.U8, minU8AVX2, minLoop[uint8])
	k[comm.U8][comm.Max] = vectorized(comm.U8, maxU8AVX2, maxLoop[uint8])
	k[comm.I32][comm.Sum] = vectorized(comm.I32, addI32AVX2, sumLoop[int32])
	k[comm.U32][comm.Sum] = vectorized(comm.U32, addI32AVX2, sumLoop[uint32])
	k[comm.I32][comm.Prod] = vectorized(comm.I32, mulI32AVX2, prodLoop[int32])
	k[comm.U32][comm.Prod] = vectorized(comm.U32, mulI32AVX2, prodLoop[uint32])
	k[comm.I32][comm.Min] = vectorized(comm.I32, minI32AVX2, minLoop[int32])
	k[comm.I32][comm.Max] = vectorized(comm.I32, maxI32AVX2, maxLoop[int32])
	k[comm.U32][comm.Min] = vectorized(comm.U32, minU32AVX2, minLoop[uint32])
	k[comm.U32][comm.Max] = vectorized(comm.U32, maxU32AVX2, maxLoop[uint32])
	k[comm.I64][comm.Sum] = vectorized(comm.I64, addI64AVX2, sumLoop[int64])
	k[comm.U64][comm.Sum] = vectorized(comm.U64, addI64AVX2, sumLoop[uint64])
	return k
}

// vectorized runs vec over the whole 32-byte blocks of dst and src and the
// scalar loop over the rest, after the length check typed makes.
func vectorized[T any](dt comm.DType, vec func(d, s *byte, n int), tail func(d, s []T)) func(dst, src []byte) {
	return func(dst, src []byte) {
		checkLengths(dt, dst, src)
		n := len(dst) &^ 31
		if n > 0 {
			vec(&dst[0], &src[0], n)
		}
		if n < len(dst) {
			tail(view[T](dst[n:]), view[T](src[n:]))
		}
	}
}

// whole runs vec, which takes any whole number of elements, over all of dst
// and src, after the length check typed makes.
func whole(dt comm.DType, vec func(d, s *byte, n int)) func(dst, src []byte) {
	return func(dst, src []byte) {
		checkLengths(dt, dst, src)
		if len(dst) > 0 {
			vec(&dst[0], &src[0], len(dst))
		}
	}
}
