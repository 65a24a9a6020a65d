package ncclfake

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nccl/internal/cuapi"
)

// NCCL's PreMulSum ops (ncclRedOpCreatePreMulSum, ncclRedOpDestroy): an op
// is cuapi.NCCLNumOps + k for the k-th live slot of its communicator, and
// is good for collectives of its datatype on that communicator only. Each
// rank multiplies its own input by its own scalar (reduce_kernel.h,
// Apply_PreOp of FuncPreMulSum: x × scalar rounded to the type, which
// tier.PreMul reproduces), then the products are summed; ranks may use
// different scalars, and different op numbers. A collective captures its
// op's scalar when it is called, so the op may be destroyed as soon as
// the call returns, as NCCL allows.

// fakePreMul is one live PreMulSum op.
type fakePreMul struct {
	dt     cuapi.DataType
	scalar []byte // one value of dt, as the caller passed it
}

// RedOpCreatePreMulSum makes a PreMulSum op on h. The fake reads only
// host-immediate scalars (cuapi.ScalarHostImmediate), the residence this
// package passes.
func (n fakeNCCL) RedOpCreatePreMulSum(op *cuapi.RedOp, scalar *byte, dt cuapi.DataType, residence int32, h cuapi.Comm) cuapi.NCCLResult {
	w := n.w
	w.mu.Lock()
	defer w.mu.Unlock()
	c, r := w.ready(h, "ncclRedOpCreatePreMulSum")
	if r != cuapi.NCCLSuccess {
		return r
	}
	switch {
	case op == nil || scalar == nil:
		return w.fail(c, cuapi.NCCLInvalidArgument, "ncclRedOpCreatePreMulSum on rank %d: op or scalar is NULL", c.rank)
	case !w.typeOK(dt):
		return w.fail(c, cuapi.NCCLInvalidArgument, "ncclRedOpCreatePreMulSum on rank %d: invalid type %d", c.rank, dt)
	case !fakeDTypes[dt].IsFloat():
		return w.fail(c, cuapi.NCCLInvalidArgument, "ncclRedOpCreatePreMulSum on rank %d: the fake implements PreMulSum on float types only, not %s", c.rank, fakeTypeName(dt))
	case residence != cuapi.ScalarHostImmediate:
		return w.fail(c, cuapi.NCCLInvalidArgument, "ncclRedOpCreatePreMulSum on rank %d: the fake reads host-immediate scalars only (residence %d)", c.rank, residence)
	}
	k := slices.Index(c.premul, nil)
	if k < 0 {
		k = len(c.premul)
		c.premul = append(c.premul, nil)
	}
	c.premul[k] = &fakePreMul{dt: dt, scalar: slices.Clone(unsafe.Slice(scalar, fakeTypeSize(dt)))}
	*op = cuapi.NCCLNumOps + cuapi.RedOp(k)
	return cuapi.NCCLSuccess
}

// RedOpDestroy releases a PreMulSum op of h.
func (n fakeNCCL) RedOpDestroy(op cuapi.RedOp, h cuapi.Comm) cuapi.NCCLResult {
	w := n.w
	w.mu.Lock()
	defer w.mu.Unlock()
	c, r := w.comm(h, "ncclRedOpDestroy")
	if r != cuapi.NCCLSuccess {
		return r
	}
	p := c.userOp(op)
	if p == nil {
		return w.fail(c, cuapi.NCCLInvalidArgument, "ncclRedOpDestroy on rank %d: %v is not a live op of this communicator", c.rank, fakeOpName(op))
	}
	c.premul[op-cuapi.NCCLNumOps] = nil
	return cuapi.NCCLSuccess
}

// userOp is c's live PreMulSum op op, or nil. The caller holds w.mu.
func (c *fakeComm) userOp(op cuapi.RedOp) *fakePreMul {
	k := int(op) - int(cuapi.NCCLNumOps)
	if k < 0 || k >= len(c.premul) {
		return nil
	}
	return c.premul[k]
}

// typeOK reports whether this NCCL has datatype dt (the fp8 types from
// 2.24 on).
func (w *fakeWorld) typeOK(dt cuapi.DataType) bool {
	if dt == cuapi.NCCLFloat8e4m3 || dt == cuapi.NCCLFloat8e5m2 {
		return w.opt.Version >= cuapi.FP8VersionCode
	}
	return fakeTypeOK(dt)
}

// scalarOf is the value of a PreMulSum scalar of dt, a float type.
func scalarOf(dt comm.DType, b []byte) float64 {
	var w [8]byte
	copy(w[:], b)
	v := binary.LittleEndian.Uint64(w[:])
	switch dt {
	case comm.F32:
		return float64(math.Float32frombits(uint32(v)))
	case comm.F64:
		return math.Float64frombits(v)
	case comm.F16:
		return float64(comm.Float16(v).Float32())
	case comm.BF16:
		return float64(comm.BFloat16(v).Float32())
	case comm.F8E4M3:
		return float64(comm.Float8E4M3(v).Float32())
	case comm.F8E5M2:
		return float64(comm.Float8E5M2(v).Float32())
	}
	panic(fmt.Sprintf("ncclfake: PreMulSum on %v", dt)) // RedOpCreatePreMulSum refuses it
}
