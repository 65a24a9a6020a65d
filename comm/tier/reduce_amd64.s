//go:build !purego

#include "textflag.h"

// AVX2 reduction kernels: dst[i] = dst[i] op src[i] over n bytes, n a
// multiple of 32 (the caller does the rest with the scalar loops), or for
// the float Sum and Prod kernels any multiple of the element size. See
// reduce_amd64.go for what each computes and why its bits are the scalar
// kernel's. The Go signature of every kernel is
//
//	func(d, s *byte, n int)
//
// Operand order matters where NaNs meet: in Go's three-operand form
// "VADDPS m, Y0, Y0" is Intel's "VADDPS ymm0, ymm0, m", whose first source
// (dst, here) is the one whose NaN a two-NaN result keeps, as the scalar
// "ADDSS src, dst" does.

// VECTORS is the vector part of a kernel: four vectors (128 bytes) per
// round, then one vector at a time; it jumps to AFTER when no whole vector
// is left.
#define VECTORS(OP, AFTER) \
	MOVQ d+0(FP), DI; \
	MOVQ s+8(FP), SI; \
	MOVQ n+16(FP), CX; \
	MOVQ CX, DX; \
	SHRQ $7, CX; \
	JZ   one; \
four: \
	VMOVDQU 0(DI), Y0; \
	VMOVDQU 32(DI), Y1; \
	VMOVDQU 64(DI), Y2; \
	VMOVDQU 96(DI), Y3; \
	OP      0(SI), Y0, Y0; \
	OP      32(SI), Y1, Y1; \
	OP      64(SI), Y2, Y2; \
	OP      96(SI), Y3, Y3; \
	VMOVDQU Y0, 0(DI); \
	VMOVDQU Y1, 32(DI); \
	VMOVDQU Y2, 64(DI); \
	VMOVDQU Y3, 96(DI); \
	ADDQ    $128, DI; \
	ADDQ    $128, SI; \
	DECQ    CX; \
	JNZ     four; \
one: \
	ANDQ $127, DX; \
	SHRQ $5, DX; \
	JZ   AFTER; \
loop1: \
	VMOVDQU 0(DI), Y0; \
	OP      0(SI), Y0, Y0; \
	VMOVDQU Y0, 0(DI); \
	ADDQ    $32, DI; \
	ADDQ    $32, SI; \
	DECQ    DX; \
	JNZ     loop1; \

// ELEMWISE is a kernel whose op is one instruction: four vectors (128
// bytes) per round, then one vector at a time.
#define ELEMWISE(NAME, OP) \
TEXT NAME(SB), NOSPLIT, $0-24; \
	VECTORS(OP, done); \
done: \
	VZEROUPPER; \
	RET

// FLOATWISE is ELEMWISE for float Sum and Prod over any whole number of
// elements: the bytes after the last whole vector go one element at a time
// through the scalar VEX form of the op (SOP, with SMOV moves of ES bytes),
// whose first source is dst too. So every element of a float kernel, not
// only the vector ones, keeps dst's NaN when both are NaN; the Go loops
// leave that to the compiler, which orders the operands differently from
// one build to another (the race detector's, for one).
#define FLOATWISE(NAME, OP, SOP, SMOV, ES) \
TEXT NAME(SB), NOSPLIT, $0-24; \
	VECTORS(OP, tail); \
tail: \
	MOVQ n+16(FP), DX; \
	ANDQ $31, DX; \
	JZ   done; \
loopS: \
	SMOV 0(DI), X0; \
	SOP  0(SI), X0, X0; \
	SMOV X0, 0(DI); \
	ADDQ $ES, DI; \
	ADDQ $ES, SI; \
	SUBQ $ES, DX; \
	JNZ  loopS; \
done: \
	VZEROUPPER; \
	RET

FLOATWISE(·addF32AVX2, VADDPS, VADDSS, VMOVSS, 4)
FLOATWISE(·addF64AVX2, VADDPD, VADDSD, VMOVSD, 8)
FLOATWISE(·mulF32AVX2, VMULPS, VMULSS, VMOVSS, 4)
FLOATWISE(·mulF64AVX2, VMULPD, VMULSD, VMOVSD, 8)
ELEMWISE(·addI8AVX2, VPADDB)
ELEMWISE(·addI32AVX2, VPADDD)
ELEMWISE(·addI64AVX2, VPADDQ)
ELEMWISE(·mulI32AVX2, VPMULLD)
ELEMWISE(·minI8AVX2, VPMINSB)
ELEMWISE(·maxI8AVX2, VPMAXSB)
ELEMWISE(·minU8AVX2, VPMINUB)
ELEMWISE(·maxU8AVX2, VPMAXUB)
ELEMWISE(·minI32AVX2, VPMINSD)
ELEMWISE(·maxI32AVX2, VPMAXSD)
ELEMWISE(·minU32AVX2, VPMINUD)
ELEMWISE(·maxU32AVX2, VPMAXUD)

// Float Min and Max compare keys, as minMax32 and minMax64 do: the bits b
// mapped to a total order, k = b ^ (sign(b) & magnitude mask) ^ flip, and
// the smallest integer for a NaN; the result is src where key(src) <
// key(dst), else dst. Registers: Y8 the magnitude mask, Y9 the Inf bits,
// Y10 flip (0: Min, all ones: Max), Y11 the smallest integer, Y12 zero.

// KEY32 sets K to the key of the f32 lanes of B; T is scratch.
#define KEY32(B, K, T) \
	VPSRAD    $31, B, K; \
	VPAND     Y8, K, K; \
	VPXOR     B, K, K; \
	VPXOR     Y10, K, K; \
	VPAND     Y8, B, T; \
	VPCMPGTD  Y9, T, T; \
	VPBLENDVB T, Y11, K, K

// KEY64 is KEY32 for f64 lanes (AVX2 has no 64-bit arithmetic shift: the
// sign mask is 0 > b).
#define KEY64(B, K, T) \
	VPCMPGTQ  B, Y12, K; \
	VPAND     Y8, K, K; \
	VPXOR     B, K, K; \
	VPXOR     Y10, K, K; \
	VPAND     Y8, B, T; \
	VPCMPGTQ  Y9, T, T; \
	VPBLENDVB T, Y11, K, K

// MINMAX is a float Min or Max kernel over KEY: one vector per round.
#define MINMAX(KEY, CMPGT) \
	MOVQ d+0(FP), DI; \
	MOVQ s+8(FP), SI; \
	MOVQ n+16(FP), CX; \
	SHRQ $5, CX; \
	JZ   done; \
loop: \
	VMOVDQU   0(DI), Y0; \
	VMOVDQU   0(SI), Y1; \
	KEY(Y0, Y2, Y4); \
	KEY(Y1, Y3, Y5); \
	CMPGT     Y3, Y2, Y2; \
	VPBLENDVB Y2, Y1, Y0, Y0; \
	VMOVDQU   Y0, 0(DI); \
	ADDQ      $32, DI; \
	ADDQ      $32, SI; \
	DECQ      CX; \
	JNZ       loop; \
done: \
	VZEROUPPER; \
	RET

// SPLAT32 fills Y with the 32-bit constant C; SPLAT64 with the 64-bit one.
#define SPLAT32(C, X, Y) \
	MOVL         C, AX; \
	MOVQ         AX, X; \
	VPBROADCASTD X, Y

#define SPLAT64(C, X, Y) \
	MOVQ         C, AX; \
	MOVQ         AX, X; \
	VPBROADCASTQ X, Y

// func minMaxF32AVX2(d, s *byte, n int, flip int32)
TEXT ·minMaxF32AVX2(SB), NOSPLIT, $0-28
	SPLAT32($0x7fffffff, X8, Y8)
	SPLAT32($0x7f800000, X9, Y9)
	MOVL flip+24(FP), AX
	MOVQ AX, X10
	VPBROADCASTD X10, Y10
	SPLAT32($0x80000000, X11, Y11)
	VPXOR Y12, Y12, Y12
	MINMAX(KEY32, VPCMPGTD)

// func minMaxF64AVX2(d, s *byte, n int, flip int64)
TEXT ·minMaxF64AVX2(SB), NOSPLIT, $0-32
	SPLAT64($0x7fffffffffffffff, X8, Y8)
	SPLAT64($0x7ff0000000000000, X9, Y9)
	MOVQ flip+24(FP), AX
	MOVQ AX, X10
	VPBROADCASTQ X10, Y10
	SPLAT64($0x8000000000000000, X11, Y11)
	VPXOR Y12, Y12, Y12
	MINMAX(KEY64, VPCMPGTQ)

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv0() (eax uint32)
TEXT ·xgetbv0(SB), NOSPLIT, $0-4
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	RET
