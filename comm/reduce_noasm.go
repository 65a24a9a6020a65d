//go:build !amd64 || purego

package comm

// vectorKernels is scalar: this build has no vector kernels.
func vectorKernels(scalar [U64 + 1][Avg + 1]func(dst, src []byte)) [U64 + 1][Avg + 1]func(dst, src []byte) {
	return scalar
}
