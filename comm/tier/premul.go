package tier

import (
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
)

// PreMul is PreMulSum's first step on one rank: dst[i] = src[i] × scalar,
// over elements of dt, a float dtype. As NCCL does, the scalar is first
// rounded to dt (to nearest even), and each product is rounded to dt
// once: f32 and f64 multiply in their own type; f16, bf16 and the fp8
// types multiply in float32, where the product of two of their values is
// exact, and round that. dst and src must be equally long, whole elements;
// they may be the same memory. It panics otherwise, or on a dtype that is
// not a float: comm.CanReduce refuses PreMulSum there before any data moves.
func PreMul(dt comm.DType, dst, src []byte, scalar float64) {
	if !dt.IsFloat() {
		panic(fmt.Sprintf("PreMul on %v: want a float dtype", dt))
	}
	checkLengths(dt, dst, src)
	switch dt {
	case comm.F32:
		preMulLoop(view[float32](dst), view[float32](src), float32(scalar))
	case comm.F64:
		preMulLoop(view[float64](dst), view[float64](src), scalar)
	case comm.F16:
		s := comm.Float16FromFloat64(scalar).Float32()
		d, x := view[comm.Float16](dst), view[comm.Float16](src)
		for i := range d {
			d[i] = comm.Float16From(x[i].Float32() * s)
		}
	case comm.BF16:
		s := comm.BFloat16FromFloat64(scalar).Float32()
		d, x := view[comm.BFloat16](dst), view[comm.BFloat16](src)
		for i := range d {
			d[i] = comm.BFloat16From(x[i].Float32() * s)
		}
	case comm.F8E4M3, comm.F8E5M2:
		f := fp8Of(dt)
		s := f.widen(f.narrow(scalar))
		fp8Map(dst, src, func(v uint8) uint8 { return f.narrow(float64(f.widen(v) * s)) })
	}
}

func preMulLoop[T float32 | float64](d, s []T, scalar T) {
	s = s[:len(d)]
	for i, x := range s {
		d[i] = x * scalar
	}
}

// PreMulSend is the send a host schedule reduces for c: for PreMulSum a
// new buffer holding send × c.Scalar (PreMul), so that the caller's send
// is never written; otherwise send itself. A call in place becomes one
// out of place, which every schedule runs alike.
func PreMulSend(c comm.Call, send []byte) []byte {
	if !c.Kind.Reduces() || c.Op != comm.PreMulSum || send == nil {
		return send
	}
	out := make([]byte, len(send))
	PreMul(c.Send.DType(), out, send, c.Scalar)
	return out
}
