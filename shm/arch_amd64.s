//go:build !purego

#include "textflag.h"

// func copyNT(dst, src *byte, n int)
//
// n is a multiple of 64 and dst is 16-byte aligned (copyOut sees to both).
// SSE2 only, which every amd64 has: MOVOU loads, MOVNTO (MOVNTDQ) stores,
// then SFENCE, which orders the non-temporal stores before any later store
// (the post of a step, or the caller's own publication of the result).
TEXT ·copyNT(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $6, CX
	JZ   done
loop:
	MOVOU  0(SI), X0
	MOVOU  16(SI), X1
	MOVOU  32(SI), X2
	MOVOU  48(SI), X3
	MOVNTO X0, 0(DI)
	MOVNTO X1, 16(DI)
	MOVNTO X2, 32(DI)
	MOVNTO X3, 48(DI)
	ADDQ   $64, SI
	ADDQ   $64, DI
	DECQ   CX
	JNZ    loop
done:
	SFENCE
	RET

// func rdtscpAux() uint32
//
// RDTSCP's auxiliary value, which Linux sets on every CPU to
// node << 12 | cpu (the vDSO's getcpu reads it the same way).
TEXT ·rdtscpAux(SB), NOSPLIT, $0-4
	RDTSCP
	MOVL CX, ret+0(FP)
	RET

// func cpuid(leaf uint32) (eax, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-16
	MOVL leaf+0(FP), AX
	MOVL $0, CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL DX, edx+12(FP)
	RET
