//go:build !purego

package shm

import "unsafe"

// What amd64 assembly (arch_amd64.s) does for the package: non-temporal
// copies, and the number of the CPU a rank runs on. arch_other.go has the
// portable stand-ins.

//go:noescape
func copyNT(dst, src *byte, n int)

func rdtscpAux() uint32

// copyOut copies src into dst (as copy does) with non-temporal stores,
// which write around the caches: for results that would be evicted before
// anyone reads them, it saves reading every line of dst from memory before
// overwriting it (see putFor). The stores are fenced before it returns.
func copyOut(dst, src []byte) {
	n := min(len(dst), len(src))
	head := int(-uintptr(unsafe.Pointer(unsafe.SliceData(dst))) & 15)
	if n < head+64 {
		copy(dst, src)
		return
	}
	copy(dst[:head], src[:head])
	body := (n - head) &^ 63
	copyNT(&dst[head], &src[head], body)
	copy(dst[head+body:n], src[head+body:n])
}

func cpuid(leaf uint32) (eax, edx uint32)

// hasCPUID: the CPU has RDTSCP (CPUID 0x80000001, EDX bit 27), whose
// auxiliary value Linux sets to the CPU number. The waits use the CPU
// number only as a hint: a wrong one costs time, never correctness.
var hasCPUID = func() bool {
	if top, _ := cpuid(0x80000000); top < 0x80000001 {
		return false
	}
	_, edx := cpuid(0x80000001)
	return edx&(1<<27) != 0
}()

// cpuID is the CPU this thread runs on now, plus one (0: unknown). It
// costs a few tens of nanoseconds and no system call.
func cpuID() uint32 {
	if !hasCPUID {
		return 0
	}
	return rdtscpAux()&0xfff + 1
}
