package tier

import (
	"sync"

	"github.com/hiercomm/hiercomm/comm"
)

// The fp8 kernels. An fp8 dtype has 256 values, so every step is a table
// lookup: Sum, Prod, Min and Max by a table of every pair (64 KiB each,
// built on first use), computed as the steps are defined (Sum and Prod
// widened to float32 exactly, the float32 result rounded once, saturating:
// comm.Float8E4M3From, comm.Float8E5M2From; Min and Max as the 16-bit
// floats'); PreMul and FinishAvg map each value through a table of 256
// made for the call.

// fp8Format is an fp8 dtype's exact widening and its rounding.
type fp8Format struct {
	widen  func(v uint8) float32
	narrow func(f float64) uint8
}

func fp8Of(dt comm.DType) fp8Format {
	if dt == comm.F8E4M3 {
		return fp8Format{
			widen:  func(v uint8) float32 { return comm.Float8E4M3(v).Float32() },
			narrow: func(f float64) uint8 { return uint8(comm.Float8E4M3FromFloat64(f)) },
		}
	}
	return fp8Format{
		widen:  func(v uint8) float32 { return comm.Float8E5M2(v).Float32() },
		narrow: func(f float64) uint8 { return uint8(comm.Float8E5M2FromFloat64(f)) },
	}
}

// fp8Kernel is the kernel of op (Sum, Prod, Min or Max) on dt, an fp8
// dtype: Min and Max as minMaxNarrow orders them, nanAbove the largest
// magnitude that is not a NaN (E4M3 0x7e, its 448; E5M2 0x7c, its Inf).
func fp8Kernel(dt comm.DType, op comm.ReduceOp, nanAbove uint8) func(dst, src []byte) {
	table := sync.OnceValue(func() *[256][256]uint8 {
		f := fp8Of(dt)
		var t [256][256]uint8
		for a := range t {
			for b := range t[a] {
				x, y := f.widen(uint8(a)), f.widen(uint8(b))
				switch op {
				case comm.Sum:
					t[a][b] = f.narrow(float64(x + y))
				case comm.Prod:
					t[a][b] = f.narrow(float64(x * y))
				default:
					d := []uint8{uint8(a)}
					flip := int8(0)
					if op == comm.Max {
						flip = -1
					}
					minMaxNarrow(d, []uint8{uint8(b)}, nanAbove, flip)
					t[a][b] = d[0]
				}
			}
		}
		return &t
	})
	return typed(dt, func(d, s []uint8) {
		t := table()
		s = s[:len(d)]
		for i, x := range s {
			d[i] = t[d[i]][x]
		}
	})
}

// fp8Map sets d[i] to f(s[i]) through a table of f over the 256 values.
func fp8Map(d, s []uint8, f func(v uint8) uint8) {
	var t [256]uint8
	for v := range t {
		t[v] = f(uint8(v))
	}
	s = s[:len(d)]
	for i, x := range s {
		d[i] = t[x]
	}
}
