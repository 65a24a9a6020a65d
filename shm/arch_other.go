//go:build !amd64 || purego

package shm

// copyOut is copy: this build has no non-temporal stores.
func copyOut(dst, src []byte) { copy(dst, src) }

// cpuID is 0: unknown.
func cpuID() uint32 { return 0 }
