package tier

import "github.com/hiercomm/hiercomm/comm"

// Kernel is what a reducing schedule needs of a call's dtype and op: the
// element size, the in-place reduction step and whether the result is
// divided by the number of ranks at the end (Avg). Every tier that reduces
// on the host builds one with NewKernel instead of keeping its own.
type Kernel struct {
	DType comm.DType
	Op    comm.ReduceOp
	// Size is the element size in bytes.
	Size int
	// Reduce computes dst = dst op src (the Sum step for Avg); see
	// ReduceFunc for its contract.
	Reduce func(dst, src []byte)
	// Avg says that Finish divides.
	Avg bool
}

// NewKernel returns the kernel of op on dt, or ReduceFunc's error when op
// is not defined on dt.
func NewKernel(dt comm.DType, op comm.ReduceOp) (Kernel, error) {
	red, err := ReduceFunc(dt, op)
	if err != nil {
		return Kernel{}, err
	}
	return Kernel{DType: dt, Op: op, Size: dt.Size(), Reduce: red, Avg: op == comm.Avg}, nil
}

// Finish completes a reduction of n ranks' contributions held in buf: for
// Avg it divides by n (FinishAvg); for every other op it does nothing.
func (k Kernel) Finish(buf []byte, n int) {
	if k.Avg {
		FinishAvg(k.DType, buf, n)
	}
}
