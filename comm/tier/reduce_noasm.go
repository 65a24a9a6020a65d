//go:build !amd64 || purego

package tier

import "github.com/hiercomm/hiercomm/comm"

// vectorKernels is scalar: this build has no vector kernels.
func vectorKernels(scalar [comm.U64 + 1][comm.Avg + 1]func(dst, src []byte)) [comm.U64 + 1][comm.Avg + 1]func(dst, src []byte) {
	return scalar
}
