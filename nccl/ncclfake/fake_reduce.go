package ncclfake

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/nccl/internal/cuapi"
)

// NCCL's arithmetic, as the fake reproduces it. The ranks are combined in
// rank order 0, 1, 2, … (NCCL's order depends on its algorithm and
// channel), each step with comm's kernels, which round as NCCL's do (Sum
// and Prod: IEEE 754 on f32 and f64; on f16 and bf16 the exact result
// rounded to the type, which widening to float32 reproduces exactly; on
// the fp8 types NCCL adds or multiplies the two as halves, __hadd and
// __hmul, and converts back with __NV_SATFINITE (reduce_kernel.h): the
// half result is exact or, for a sum, rounded with 11 bits, more than
// twice fp8's 4 plus 2, so rounding again to fp8 gives the correctly
// rounded result, as the kernels' float32 step does; what overflows a
// half is past fp8's largest value, and saturates either way).
// Two things are NCCL's own:
//
//   - cuapi.NCCLAvg (src/enqueue.cc, hostToDevRedOp, the same from 2.23 to
//     2.30): on floating types it is ncclDevPreMulSum with the scalar
//     1/nRanks rounded to the type (f32: float(1.0/nRanks); f64:
//     1.0/nRanks; f16: __float2half(float(1.0/nRanks)); bf16:
//     __float2bfloat16(float(1.0/nRanks))): every rank's input is
//     multiplied by the scalar, rounded to the type (reduce_kernel.h,
//     Apply_PreOp of FuncPreMulSum: x*scalar, __hmul), and the products
//     are summed. So Avg over 3 ranks is not the sum divided by 3. On
//     integer types it is ncclDevSumPostDiv with nRanks: the sum (wrapping)
//     divided once by nRanks, truncated toward zero (FuncSumPostDiv's
//     divide). (Symmetric-memory kernels of 2.27+ divide after the sum
//     for floats too; they need registered windows, which this package
//     does not use.)
//   - cuapi.NCCLMin and cuapi.NCCLMax on floating types (reduce_kernel.h, FuncMinMax:
//     fminf/fmaxf, fmin/fmax, __hmin/__hmax) return the other operand when
//     one is NaN, and a NaN (the canonical one) only when both are;
//     comm's kernels propagate NaN. Zeros: -0 < +0 here, as __hmin
//     documents (comm's kernels order them so too).

// fakeDTypes maps NCCL's datatypes (nccl.h ncclDataType_t) to comm's. It
// is the fake's own table, not nccl's (launch.go), so that a wrong entry there
// shows up here.
var fakeDTypes = [...]comm.DType{
	cuapi.NCCLInt8: comm.I8, cuapi.NCCLUint8: comm.U8, cuapi.NCCLInt32: comm.I32, cuapi.NCCLUint32: comm.U32,
	cuapi.NCCLInt64: comm.I64, cuapi.NCCLUint64: comm.U64, cuapi.NCCLFloat16: comm.F16, cuapi.NCCLFloat32: comm.F32,
	cuapi.NCCLFloat64: comm.F64, cuapi.NCCLBfloat16: comm.BF16,
	cuapi.NCCLFloat8e4m3: comm.F8E4M3, cuapi.NCCLFloat8e5m2: comm.F8E5M2, // 2.24 and later (fakeWorld.typeOK)
}

var fakeTypeNames = [...]string{
	cuapi.NCCLInt8: "ncclInt8", cuapi.NCCLUint8: "ncclUint8", cuapi.NCCLInt32: "ncclInt32", cuapi.NCCLUint32: "ncclUint32",
	cuapi.NCCLInt64: "ncclInt64", cuapi.NCCLUint64: "ncclUint64", cuapi.NCCLFloat16: "ncclFloat16", cuapi.NCCLFloat32: "ncclFloat32",
	cuapi.NCCLFloat64: "ncclFloat64", cuapi.NCCLBfloat16: "ncclBfloat16",
	cuapi.NCCLFloat8e4m3: "ncclFloat8e4m3", cuapi.NCCLFloat8e5m2: "ncclFloat8e5m2",
}

// fakeOps maps NCCL's reduction ops (nccl.h ncclRedOp_t) but cuapi.NCCLAvg to
// comm's.
var fakeOps = [...]comm.ReduceOp{cuapi.NCCLSum: comm.Sum, cuapi.NCCLProd: comm.Prod, cuapi.NCCLMax: comm.Max, cuapi.NCCLMin: comm.Min}

var fakeOpNames = [...]string{cuapi.NCCLSum: "ncclSum", cuapi.NCCLProd: "ncclProd", cuapi.NCCLMax: "ncclMax", cuapi.NCCLMin: "ncclMin", cuapi.NCCLAvg: "ncclAvg"}

func fakeTypeOK(dt cuapi.DataType) bool { return dt >= 0 && int(dt) < len(fakeDTypes) }

// fakeTypeSize is the size of dt in bytes (0 if NCCL has no such type).
func fakeTypeSize(dt cuapi.DataType) int {
	if !fakeTypeOK(dt) {
		return 0
	}
	return fakeDTypes[dt].Size()
}

func fakeTypeName(dt cuapi.DataType) string {
	if !fakeTypeOK(dt) {
		return fmt.Sprintf("ncclDataType(%d)", dt)
	}
	return fakeTypeNames[dt]
}

func fakeOpName(op cuapi.RedOp) string {
	if op >= cuapi.NCCLNumOps {
		return fmt.Sprintf("ncclRedOp(%d, PreMulSum)", op)
	}
	if op < cuapi.NCCLSum || op > cuapi.NCCLAvg {
		return fmt.Sprintf("ncclRedOp(%d)", op)
	}
	return fakeOpNames[op]
}

// reduceAs returns the reduction of ins (one per rank, in rank order,
// equal lengths) by op, as NCCL computes it; for a PreMulSum op, scalars
// holds each rank's scalar. ins are not modified.
func reduceAs(dt cuapi.DataType, op cuapi.RedOp, ins, scalars [][]byte) []byte {
	cdt := fakeDTypes[dt]
	n := len(ins)
	in := make([][]byte, n)
	for r, b := range ins {
		in[r] = slices.Clone(b)
	}
	cop := comm.Sum
	switch {
	case op >= cuapi.NCCLNumOps:
		for r, b := range in {
			tier.PreMul(cdt, b, b, scalarOf(cdt, scalars[r]))
		}
	case op != cuapi.NCCLAvg:
		cop = fakeOps[op]
	}
	if op == cuapi.NCCLAvg && cdt.IsFloat() {
		for _, b := range in {
			preMul(cdt, b, n)
		}
	}
	f, err := tier.ReduceFunc(cdt, cop)
	if err != nil {
		panic(err) // every (dtype, Sum|Prod|Min|Max) has a kernel: a bug
	}
	acc := in[0]
	for _, b := range in[1:] {
		if (op == cuapi.NCCLMin || op == cuapi.NCCLMax) && cdt.IsFloat() {
			nanToOther(cdt, acc, b)
		}
		f(acc, b)
	}
	if op == cuapi.NCCLAvg && !cdt.IsFloat() {
		postDiv(cdt, acc, n)
	}
	return acc
}

// preMul multiplies every element of b by NCCL's Avg scalar for n ranks,
// rounding each product to the type (PreMulSum's preOp).
func preMul(dt comm.DType, b []byte, n int) {
	le := binary.LittleEndian
	switch dt {
	case comm.F32:
		s := float32(1.0 / float64(n))
		for i := 0; i < len(b); i += 4 {
			le.PutUint32(b[i:], math.Float32bits(math.Float32frombits(le.Uint32(b[i:]))*s))
		}
	case comm.F64:
		s := 1.0 / float64(n)
		for i := 0; i < len(b); i += 8 {
			le.PutUint64(b[i:], math.Float64bits(math.Float64frombits(le.Uint64(b[i:]))*s))
		}
	case comm.F16:
		// The product of two f16 is exact in float64: one rounding, as
		// __hmul's.
		s := float64(comm.Float16From(float32(1.0 / float64(n))).Float32())
		for i := 0; i < len(b); i += 2 {
			x := float64(comm.Float16(le.Uint16(b[i:])).Float32())
			le.PutUint16(b[i:], uint16(comm.Float16FromFloat64(x*s)))
		}
	case comm.BF16:
		s := float64(comm.BFloat16From(float32(1.0 / float64(n))).Float32())
		for i := 0; i < len(b); i += 2 {
			x := float64(comm.BFloat16(le.Uint16(b[i:])).Float32())
			le.PutUint16(b[i:], uint16(comm.BFloat16FromFloat64(x*s)))
		}
	case comm.F8E4M3:
		// __nv_cvt_float_to_fp8(float(1.0/nRanks), __NV_SATFINITE, ...);
		// the product (__hmul of the two as halves) is exact in half, so
		// one rounding, as tier.PreMul's.
		tier.PreMul(dt, b, b, float64(comm.Float8E4M3From(float32(1.0/float64(n))).Float32()))
	case comm.F8E5M2:
		tier.PreMul(dt, b, b, float64(comm.Float8E5M2From(float32(1.0/float64(n))).Float32()))
	}
}

// postDiv divides every element of b by n, truncating toward zero, as
// FuncSumPostDiv does to the (wrapped) sum.
func postDiv(dt comm.DType, b []byte, n int) {
	le := binary.LittleEndian
	d := uint64(n)
	div := func(x int64) int64 { // signed: |x| / n, sign restored
		if x < 0 {
			return -int64(uint64(-x) / d)
		}
		return int64(uint64(x) / d)
	}
	switch dt {
	case comm.I8:
		for i := range b {
			b[i] = byte(div(int64(int8(b[i]))))
		}
	case comm.U8:
		for i := range b {
			b[i] = byte(uint64(b[i]) / d)
		}
	case comm.I32:
		for i := 0; i < len(b); i += 4 {
			le.PutUint32(b[i:], uint32(div(int64(int32(le.Uint32(b[i:]))))))
		}
	case comm.U32:
		for i := 0; i < len(b); i += 4 {
			le.PutUint32(b[i:], uint32(uint64(le.Uint32(b[i:]))/d))
		}
	case comm.I64:
		for i := 0; i < len(b); i += 8 {
			le.PutUint64(b[i:], uint64(div(int64(le.Uint64(b[i:])))))
		}
	case comm.U64:
		for i := 0; i < len(b); i += 8 {
			le.PutUint64(b[i:], le.Uint64(b[i:])/d)
		}
	}
}

// nanToOther prepares one step of a float Min or Max so that comm's
// kernel gives fmin's answer: where one operand is NaN it is replaced by
// the other; where both are, both become the canonical NaN (CUDA's
// result then: every bit but the sign set).
func nanToOther(dt comm.DType, d, s []byte) {
	var inf uint64 // the type's +Inf: a NaN's magnitude is above it
	switch dt {
	case comm.F32:
		inf = 0x7f800000
	case comm.F64:
		inf = 0x7ff0000000000000
	case comm.F16:
		inf = 0x7c00
	case comm.BF16:
		inf = 0x7f80
	case comm.F8E4M3:
		inf = 0x7e // no Inf: the largest finite magnitude; only 0x7f is above it
	case comm.F8E5M2:
		inf = 0x7c
	default:
		return
	}
	size := dt.Size()
	nan := uint64(1)<<(8*size-1) - 1 // the canonical NaN, also the magnitude mask
	for i := 0; i < len(d); i += size {
		x, y := leGet(d[i:], size), leGet(s[i:], size)
		xn, yn := x&nan > inf, y&nan > inf
		switch {
		case xn && yn:
			lePut(d[i:], size, nan)
			lePut(s[i:], size, nan)
		case xn:
			lePut(d[i:], size, y)
		case yn:
			lePut(s[i:], size, x)
		}
	}
}

// leGet reads the little-endian unsigned integer of size bytes (1, 2, 4
// or 8) at the start of b.
func leGet(b []byte, size int) uint64 {
	le := binary.LittleEndian
	switch size {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(le.Uint16(b))
	case 4:
		return uint64(le.Uint32(b))
	}
	return le.Uint64(b)
}

// lePut writes v as a little-endian unsigned integer of size bytes (1,
// 2, 4 or 8) at the start of b.
func lePut(b []byte, size int, v uint64) {
	le := binary.LittleEndian
	switch size {
	case 1:
		b[0] = byte(v)
	case 2:
		le.PutUint16(b, uint16(v))
	case 4:
		le.PutUint32(b, uint32(v))
	default:
		le.PutUint64(b, v)
	}
}

// OneRankAvgCovers is how many of nElts elements (of size eltSize) NCCL
// before 2.29.7 writes in a float Avg, or any PreMulSum, on a communicator
// of one rank (NVIDIA/nccl issue 1950, fixed in v2.29.7-1): such a call runs the
// oneRankReduce kernel (src/device/onerank.cu, ncclLaunchOneRank) on
// min(32, ⌈bytes/16 KiB⌉) blocks, each of ⌊nElts/blocks⌋ elements rounded
// up to a 16-byte pack, so the last nElts mod blocks elements may be left
// as they were. On a GPU (NCCL 2.28.3, H100) an f64 AllReduce of 1000003
// elements left exactly the last 3 unwritten, as this computes.
func OneRankAvgCovers(nElts, eltSize int) int {
	if nElts == 0 {
		return 0
	}
	blocks := min(32, (nElts*eltSize+16<<10-1)/(16<<10))
	perPack := 16 / eltSize
	per := (nElts/blocks + perPack - 1) / perPack * perPack
	return min(blocks*per, nElts)
}
