package procgroup

import (
	"syscall"
	"unsafe"
)

// cpuMask is a CPU set as the kernel takes it: 1024 CPUs.
type cpuMask [16]uint64

// threadCPUs is the CPUs the calling thread may run on, in order (nil
// when the kernel will not say).
func threadCPUs() []int {
	var m cpuMask
	if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, 0, unsafe.Sizeof(m), uintptr(unsafe.Pointer(&m))); e != 0 {
		return nil
	}
	var cpus []int
	for w, bits := range m {
		for b := range 64 {
			if bits&(1<<b) != 0 {
				cpus = append(cpus, 64*w+b)
			}
		}
	}
	return cpus
}

// bindThread binds the calling thread to cpus (none: an error).
func bindThread(cpus []int) error {
	var m cpuMask
	for _, c := range cpus {
		if c < 0 || c >= 64*len(m) {
			continue
		}
		m[c/64] |= 1 << (c % 64)
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(m), uintptr(unsafe.Pointer(&m))); e != 0 {
		return e
	}
	return nil
}
