//go:build !amd64 || purego

package tier

import "github.com/hiercomm/hiercomm/comm"

// vectorKernels is scalar: this build has no vector kernels.
func vectorKernels(scalar kernelTable) kernelTable {
	return scalar
}
