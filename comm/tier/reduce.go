package tier

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/hiercomm/hiercomm/comm"
)

// The CPU reduction kernels: one step of a reduction, dst = dst op src,
// elementwise over raw host bytes. Every transport that reduces on the host
// (nexar, shm, hierarchy's staging) calls them, so they are the inner loop of
// every collective; see docs/reductions.md for the measured speeds.
//
// Semantics, the same on every path so that every algorithm gives the same
// bits for the same order of steps:
//
//   - Sum and Prod follow IEEE 754 (round to nearest even) on f32 and f64.
//   - f16, bf16 and the fp8 types widen both operands to float32
//     (exactly), operate in float32 and round the result to nearest even
//     back to their width (fp8: saturating at the largest finite value,
//     as comm.Float8E4M3From and comm.Float8E5M2From do): every pairwise
//     step rounds, as NCCL does. A reduction over P ranks therefore
//     rounds P-1 times; the order of the steps is the algorithm's.
//   - Min and Max propagate NaN: if dst is NaN the result is dst, else if src
//     is NaN the result is src (bits kept as they are). Otherwise they order
//     -0 below +0, so min(-0, +0) is -0 and max(-0, +0) is +0 whichever
//     operand comes first: Min and Max are exactly commutative (but for
//     which of two NaNs wins).
//   - Integer Sum and Prod wrap around (two's complement).
//   - BAnd, BOr and BXor are bitwise, on the integer dtypes and bool.
//   - Bool is logical: Sum and Max are OR, Prod and Min are AND.
//   - Avg is Sum during the reduction; the caller divides once at the end
//     with FinishAvg. Avg on integer dtypes is refused.

// ReduceFunc returns the kernel that computes dst[i] = dst[i] op src[i] for
// every element of dst, viewing both as elements of dt (little-endian, as
// the host; aligned for dt, as Go allocations are). dst and src must have the
// same length, a multiple of dt.Size(); the kernel panics otherwise, since a
// caller that gets this wrong has a bug. They may be the same memory but must
// not otherwise overlap. The kernel keeps no state and may be called from
// several goroutines at once.
//
// For Avg it returns the Sum kernel: divide once at the end with FinishAvg.
// For PreMulSum too: each rank scales its own input first (PreMul).
// It returns an error when op is not defined on dt (see comm.CanReduce).
func ReduceFunc(dt comm.DType, op comm.ReduceOp) (func(dst, src []byte), error) {
	if err := comm.CanReduce(dt, op); err != nil {
		return nil, err
	}
	if op == comm.Avg || op == comm.PreMulSum {
		op = comm.Sum
	}
	return kernels[dt][op], nil
}

// kernelTable holds a kernel per dtype and op, nil where op is undefined.
type kernelTable = [comm.NumDTypes][comm.NumReduceOps]func(dst, src []byte)

// kernels[dt][op] is the kernel for dt and op (nil where undefined): the
// scalar one, or where this machine has one, a vector kernel that gives the
// same bits (reduce_amd64.go).
var kernels = vectorKernels(scalarKernels)

// scalarKernels are the portable kernels, in Go.
var scalarKernels = withBitwise(kernelTable{
	comm.F32: {
		comm.Sum:  typed(comm.F32, sumLoop[float32]),
		comm.Prod: typed(comm.F32, prodLoop[float32]),
		comm.Min:  typed(comm.F32, func(d, s []uint32) { minMax32(d, s, 0) }),
		comm.Max:  typed(comm.F32, func(d, s []uint32) { minMax32(d, s, -1) }),
	},
	comm.F64: {
		comm.Sum:  typed(comm.F64, sumLoop[float64]),
		comm.Prod: typed(comm.F64, prodLoop[float64]),
		comm.Min:  typed(comm.F64, func(d, s []uint64) { minMax64(d, s, 0) }),
		comm.Max:  typed(comm.F64, func(d, s []uint64) { minMax64(d, s, -1) }),
	},
	comm.F16: {
		comm.Sum:  typed(comm.F16, sumF16),
		comm.Prod: typed(comm.F16, prodF16),
		comm.Min:  typed(comm.F16, func(d, s []uint16) { minMaxNarrow(d, s, 0x7c00, int16(0)) }),
		comm.Max:  typed(comm.F16, func(d, s []uint16) { minMaxNarrow(d, s, 0x7c00, int16(-1)) }),
	},
	comm.BF16: {
		comm.Sum:  typed(comm.BF16, sumBF16),
		comm.Prod: typed(comm.BF16, prodBF16),
		comm.Min:  typed(comm.BF16, func(d, s []uint16) { minMaxNarrow(d, s, 0x7f80, int16(0)) }),
		comm.Max:  typed(comm.BF16, func(d, s []uint16) { minMaxNarrow(d, s, 0x7f80, int16(-1)) }),
	},
	comm.I8: {
		comm.Sum:  typed(comm.I8, sumBytes),
		comm.Prod: typed(comm.I8, prodLoop[int8]),
		comm.Min:  typed(comm.I8, minLoop[int8]),
		comm.Max:  typed(comm.I8, maxLoop[int8]),
	},
	comm.U8: {
		comm.Sum:  typed(comm.U8, sumBytes),
		comm.Prod: typed(comm.U8, prodLoop[uint8]),
		comm.Min:  typed(comm.U8, minLoop[uint8]),
		comm.Max:  typed(comm.U8, maxLoop[uint8]),
	},
	comm.I32: {
		comm.Sum:  typed(comm.I32, sumLoop[int32]),
		comm.Prod: typed(comm.I32, prodLoop[int32]),
		comm.Min:  typed(comm.I32, minLoop[int32]),
		comm.Max:  typed(comm.I32, maxLoop[int32]),
	},
	comm.U32: {
		comm.Sum:  typed(comm.U32, sumLoop[uint32]),
		comm.Prod: typed(comm.U32, prodLoop[uint32]),
		comm.Min:  typed(comm.U32, minLoop[uint32]),
		comm.Max:  typed(comm.U32, maxLoop[uint32]),
	},
	comm.I64: {
		comm.Sum:  typed(comm.I64, sumLoop[int64]),
		comm.Prod: typed(comm.I64, prodLoop[int64]),
		comm.Min:  typed(comm.I64, minLoop[int64]),
		comm.Max:  typed(comm.I64, maxLoop[int64]),
	},
	comm.U64: {
		comm.Sum:  typed(comm.U64, sumLoop[uint64]),
		comm.Prod: typed(comm.U64, prodLoop[uint64]),
		comm.Min:  typed(comm.U64, minLoop[uint64]),
		comm.Max:  typed(comm.U64, maxLoop[uint64]),
	},
	comm.I16: {
		comm.Sum:  typed(comm.I16, sumLoop[int16]),
		comm.Prod: typed(comm.I16, prodLoop[int16]),
		comm.Min:  typed(comm.I16, minLoop[int16]),
		comm.Max:  typed(comm.I16, maxLoop[int16]),
	},
	comm.U16: {
		comm.Sum:  typed(comm.U16, sumLoop[uint16]),
		comm.Prod: typed(comm.U16, prodLoop[uint16]),
		comm.Min:  typed(comm.U16, minLoop[uint16]),
		comm.Max:  typed(comm.U16, maxLoop[uint16]),
	},
	// Bool is logical: OR for Sum and Max, AND for Prod and Min, on bytes
	// that are 0 or 1 (BAnd, BOr and BXor come from withBitwise).
	comm.Bool: {
		comm.Sum:  typed(comm.Bool, orBytes),
		comm.Prod: typed(comm.Bool, andBytes),
		comm.Min:  typed(comm.Bool, andBytes),
		comm.Max:  typed(comm.Bool, orBytes),
	},
	comm.F8E4M3: {
		comm.Sum:  fp8Kernel(comm.F8E4M3, comm.Sum, 0x7e),
		comm.Prod: fp8Kernel(comm.F8E4M3, comm.Prod, 0x7e),
		comm.Min:  fp8Kernel(comm.F8E4M3, comm.Min, 0x7e),
		comm.Max:  fp8Kernel(comm.F8E4M3, comm.Max, 0x7e),
	},
	comm.F8E5M2: {
		comm.Sum:  fp8Kernel(comm.F8E5M2, comm.Sum, 0x7c),
		comm.Prod: fp8Kernel(comm.F8E5M2, comm.Prod, 0x7c),
		comm.Min:  fp8Kernel(comm.F8E5M2, comm.Min, 0x7c),
		comm.Max:  fp8Kernel(comm.F8E5M2, comm.Max, 0x7c),
	},
})

// withBitwise adds BAnd, BOr and BXor to t for every integer dtype and
// Bool. Bitwise ops do not care where one element ends and the next
// begins, so one kernel over bytes serves every width.
func withBitwise(t kernelTable) kernelTable {
	for _, dt := range comm.DTypes {
		if dt.IsFloat() {
			continue
		}
		t[dt][comm.BAnd] = typed(dt, andBytes)
		t[dt][comm.BOr] = typed(dt, orBytes)
		t[dt][comm.BXor] = typed(dt, xorBytes)
	}
	return t
}

// typed adapts a loop over []T to raw bytes, checking the lengths once.
func typed[T any](dt comm.DType, loop func(d, s []T)) func(dst, src []byte) {
	return func(dst, src []byte) {
		checkLengths(dt, dst, src)
		loop(view[T](dst), view[T](src))
	}
}

// checkLengths panics unless dst and src are equally long, a whole number
// of dt's elements: a kernel's caller with other lengths has a bug.
func checkLengths(dt comm.DType, dst, src []byte) {
	if size := dt.Size(); len(dst) != len(src) || len(dst)%size != 0 {
		panic(fmt.Sprintf("comm: %v reduce kernel called with %d and %d bytes (want equal lengths, a multiple of %d)",
			dt, len(dst), len(src), size))
	}
}

// view is b as a []T: host memory from Go slices, so aligned for T. Fewer
// bytes than one T give nil without touching the pointer, which may then be
// the end of its allocation (a *T there would point outside it).
func view[T any](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

type integer interface {
	int8 | uint8 | int16 | uint16 | int32 | uint32 | int64 | uint64
}

type number interface {
	integer | float32 | float64
}

// The loops below re-slice src to len(dst) so the compiler drops the bounds
// checks, and unroll by eight: more work per iteration makes them faster
// than the plain loop with the data in cache and, as much, less sensitive to
// where the linker happens to place them (a plain loop's speed was seen to
// change by 1.6× with the layout of the binary around it).

func sumLoop[T number](d, s []T) {
	for len(d) >= 8 && len(s) >= 8 {
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
		d[4] += s[4]
		d[5] += s[5]
		d[6] += s[6]
		d[7] += s[7]
		d, s = d[8:], s[8:]
	}
	s = s[:len(d)]
	for i := range d {
		d[i] += s[i]
	}
}

func prodLoop[T number](d, s []T) {
	for len(d) >= 8 && len(s) >= 8 {
		d[0] *= s[0]
		d[1] *= s[1]
		d[2] *= s[2]
		d[3] *= s[3]
		d[4] *= s[4]
		d[5] *= s[5]
		d[6] *= s[6]
		d[7] *= s[7]
		d, s = d[8:], s[8:]
	}
	s = s[:len(d)]
	for i := range d {
		d[i] *= s[i]
	}
}

func minLoop[T integer](d, s []T) {
	s = s[:len(d)]
	for i := range d {
		d[i] = min(d[i], s[i])
	}
}

func maxLoop[T integer](d, s []T) {
	s = s[:len(d)]
	for i := range d {
		d[i] = max(d[i], s[i])
	}
}

// sumBytes is Sum for i8 and u8 (two's complement makes them the same): eight
// lanes per 64-bit word, adding the low seven bits of each lane and fixing
// the top bit with an xor so that no carry crosses a lane. Bytes go one at a
// time until dst is 8-byte aligned; then, if src is aligned too (the usual
// case: whole buffers from Go allocations, or the same offset into both),
// word by word; otherwise through unaligned little-endian loads.
func sumBytes(d, s []uint8) {
	s = s[:len(d)]
	head := min(len(d), int(-uintptr(unsafe.Pointer(unsafe.SliceData(d)))&7))
	for i := range head {
		d[i] += s[i]
	}
	d, s = d[head:], s[head:]
	n := len(d) &^ 7
	if uintptr(unsafe.Pointer(unsafe.SliceData(s)))&7 == 0 {
		dw, sw := view[uint64](d[:n]), view[uint64](s[:n])
		sw = sw[:len(dw)]
		for i, b := range sw {
			dw[i] = sumLanes8(dw[i], b)
		}
	} else {
		for i := 0; i < n; i += 8 {
			binary.LittleEndian.PutUint64(d[i:], sumLanes8(binary.LittleEndian.Uint64(d[i:]), binary.LittleEndian.Uint64(s[i:])))
		}
	}
	d, s = d[n:], s[n:]
	s = s[:len(d)]
	for i := range d {
		d[i] += s[i]
	}
}

// sumLanes8 adds the eight bytes of a and b lane by lane, wrapping.
func sumLanes8(a, b uint64) uint64 {
	const hi = 0x8080808080808080
	return (a&^hi + b&^hi) ^ (a^b)&hi
}

// andBytes, orBytes and xorBytes are the bitwise ops over bytes, eight at
// a time (one unaligned load and store each on amd64 and arm64).
func andBytes(d, s []uint8) { bitwiseBytes(d, s, comm.BAnd) }
func orBytes(d, s []uint8)  { bitwiseBytes(d, s, comm.BOr) }
func xorBytes(d, s []uint8) { bitwiseBytes(d, s, comm.BXor) }

// bitwiseBytes has a loop per op, so that the operation is inlined in it
// (through a func value it was a call per word, and 3 GB/s).
func bitwiseBytes(d, s []uint8, op comm.ReduceOp) {
	le := binary.LittleEndian
	s = s[:len(d)]
	n := len(d) &^ 7
	switch op {
	case comm.BAnd:
		for i := 0; i < n; i += 8 {
			le.PutUint64(d[i:], le.Uint64(d[i:])&le.Uint64(s[i:]))
		}
		for i := n; i < len(d); i++ {
			d[i] &= s[i]
		}
	case comm.BOr:
		for i := 0; i < n; i += 8 {
			le.PutUint64(d[i:], le.Uint64(d[i:])|le.Uint64(s[i:]))
		}
		for i := n; i < len(d); i++ {
			d[i] |= s[i]
		}
	default: // BXor
		for i := 0; i < n; i += 8 {
			le.PutUint64(d[i:], le.Uint64(d[i:])^le.Uint64(s[i:]))
		}
		for i := n; i < len(d); i++ {
			d[i] ^= s[i]
		}
	}
}

// Min and Max on floats compare bit patterns mapped to a total order
// (-NaN < -Inf < … < -0 < +0 < … < +Inf < +NaN, by flipping the magnitude
// bits of negatives) with every NaN mapped below everything: "keep the
// smaller key, dst on a tie" then propagates dst's NaN, else src's, without a
// branch. flip is 0 for Min and -1 for Max, which reverses the order of the
// non-NaN keys. nanAbove is the largest non-NaN magnitude (the Inf bits).

// minMaxNarrow is Min and Max for the 8- and 16-bit floats (fp8, f16,
// bf16): U is the bits, S the signed integer of the same width.
func minMaxNarrow[U uint8 | uint16, S int8 | int16](d, s []U, nanAbove U, flip S) {
	top := 8*unsafe.Sizeof(U(0)) - 1
	mag := ^U(0) >> 1
	key := func(b U) S {
		k := S(b) ^ S(b)>>top&S(mag) ^ flip
		if b&mag > nanAbove {
			k = S(1) << top // the smallest S
		}
		return k
	}
	s = s[:len(d)]
	for i, x := range s {
		y := d[i]
		if key(x) < key(y) {
			y = x
		}
		d[i] = y
	}
}

func minMax32(d, s []uint32, flip int32) {
	key := func(b uint32) int32 {
		k := int32(b) ^ int32(b)>>31&0x7fffffff ^ flip
		if b&0x7fffffff > 0x7f800000 {
			k = math.MinInt32
		}
		return k
	}
	s = s[:len(d)]
	for i, x := range s {
		y := d[i]
		if key(x) < key(y) {
			y = x
		}
		d[i] = y
	}
}

func minMax64(d, s []uint64, flip int64) {
	key := func(b uint64) int64 {
		k := int64(b) ^ int64(b)>>63&0x7fffffffffffffff ^ flip
		if b&0x7fffffffffffffff > 0x7ff0000000000000 {
			k = math.MinInt64
		}
		return k
	}
	s = s[:len(d)]
	for i, x := range s {
		y := d[i]
		if key(x) < key(y) {
			y = x
		}
		d[i] = y
	}
}

// f16 and bf16 Sum and Prod: widen exactly, operate in float32, round once
// to nearest even.

func sumF16(d, s []comm.Float16) {
	s = s[:len(d)]
	for i, x := range s {
		f := d[i].Float32() + x.Float32()
		h, ok := f16Normal(math.Float32bits(f))
		if !ok {
			h = comm.Float16From(f)
		}
		d[i] = h
	}
}

func prodF16(d, s []comm.Float16) {
	s = s[:len(d)]
	for i, x := range s {
		f := d[i].Float32() * x.Float32()
		h, ok := f16Normal(math.Float32bits(f))
		if !ok {
			h = comm.Float16From(f)
		}
		d[i] = h
	}
}

// f16Normal is comm.Float16From for the float32 with bits b where the result
// is a normal Float16 (ok), the common case, small enough to be inlined
// into the loops above; comm.Float16From does the rest (and the same here).
func f16Normal(b uint32) (h comm.Float16, ok bool) {
	a := b & 0x7fffffff
	// Rebias the exponent (127 → 15) in place, then round off the 13 low
	// mantissa bits: adding 0xfff plus the lowest kept bit carries exactly
	// when the dropped part is above half, or at half with the kept part odd.
	return comm.Float16(b>>16&0x8000 | (a-0x38000000+0xfff+(a>>13&1))>>13), a-0x38800000 < 0x477ff000-0x38800000
}

func sumBF16(d, s []comm.BFloat16) {
	s = s[:len(d)]
	for i, x := range s {
		d[i] = comm.BFloat16From(d[i].Float32() + x.Float32())
	}
}

func prodBF16(d, s []comm.BFloat16) {
	s = s[:len(d)]
	for i, x := range s {
		d[i] = comm.BFloat16From(d[i].Float32() * x.Float32())
	}
}

// FinishAvg divides every element of buf (elements of dt) by n, the number
// of contributions summed into it, rounding once to nearest even: f32 and
// f64 divide in their own type; f16, bf16 and the fp8 types divide in
// float64 and round to their width in one step, which is exact (a float64
// quotient of 16-bit values cannot land on a 16-bit rounding boundary unless
// the true quotient does).
// It panics when dt is not a float type or n < 1: Avg is refused on integers
// before any data moves, so either is a bug.
func FinishAvg(dt comm.DType, buf []byte, n int) {
	if !dt.IsFloat() || n < 1 || len(buf)%dt.Size() != 0 {
		panic(fmt.Sprintf("FinishAvg(%v, %d bytes, %d): want a float dtype, whole elements and n ≥ 1", dt, len(buf), n))
	}
	if n == 1 {
		return
	}
	switch dt {
	case comm.F32:
		// n ≤ 2^24 converts exactly; beyond that no one has that many ranks.
		div := float32(n)
		v := view[float32](buf)
		for i, x := range v {
			v[i] = x / div
		}
	case comm.F64:
		div := float64(n)
		v := view[float64](buf)
		for i, x := range v {
			v[i] = x / div
		}
	case comm.F16:
		div := float64(n)
		v := view[comm.Float16](buf)
		for i, x := range v {
			v[i] = comm.Float16FromFloat64(float64(x.Float32()) / div)
		}
	case comm.BF16:
		div := float64(n)
		v := view[comm.BFloat16](buf)
		for i, x := range v {
			v[i] = comm.BFloat16FromFloat64(float64(x.Float32()) / div)
		}
	case comm.F8E4M3, comm.F8E5M2:
		div, f := float64(n), fp8Of(dt)
		fp8Map(buf, buf, func(v uint8) uint8 { return f.narrow(float64(f.widen(v)) / div) })
	}
}

// FillIdentity sets every element of buf (elements of dt) to the identity of
// op: 0 for Sum, Avg, PreMulSum, BOr and BXor, 1 for Prod, +Inf (floats;
// E4M3, which has no Inf, its largest value 448) or the largest value
// (integers) for Min, -Inf or the smallest value for Max, all ones for
// BAnd. Bool's are false for Sum and Max (OR) and true for Prod and Min
// (AND). ExScan gives it to rank 0, which has no prefix. It panics on an invalid dtype or op, or a buf
// that is not whole elements.
//
// The float zero is +0, what every user expects on ExScan's rank 0. Strictly,
// IEEE addition's identity is -0 (+0 + -0 is +0): an algorithm that starts an
// accumulator from FillIdentity turns a sum of -0s into +0; one that needs
// the sign of a zero sum right starts from the first operand instead.
func FillIdentity(dt comm.DType, op comm.ReduceOp, buf []byte) {
	if !dt.Valid() || !op.Valid() || len(buf)%dt.Size() != 0 {
		panic(fmt.Sprintf("FillIdentity(%v, %v, %d bytes): want a valid dtype and op and whole elements", dt, op, len(buf)))
	}
	if len(buf) == 0 {
		return
	}
	// The identity of one element, little-endian, then doubled across buf.
	var one uint64
	switch op {
	case comm.Prod:
		one = identityProd[dt]
	case comm.Min:
		one = identityMin[dt]
	case comm.Max:
		one = identityMax[dt]
	case comm.BAnd:
		one = identityMin[comm.U64] // all ones
		if dt == comm.Bool {
			one = 1
		}
	}
	size := dt.Size()
	var elem [8]byte
	binary.LittleEndian.PutUint64(elem[:], one)
	copy(buf, elem[:size])
	for filled := size; filled < len(buf); filled *= 2 {
		copy(buf[filled:], buf[:filled])
	}
}

// The bits of the identity of Prod, Min and Max, by dtype (Sum's is 0).
var (
	identityProd = [comm.NumDTypes]uint64{comm.F32: 0x3f800000, comm.F64: 0x3ff0000000000000, comm.F16: 0x3c00, comm.BF16: 0x3f80,
		comm.I8: 1, comm.U8: 1, comm.I32: 1, comm.U32: 1, comm.I64: 1, comm.U64: 1,
		comm.I16: 1, comm.U16: 1, comm.Bool: 1, comm.F8E4M3: 0x38, comm.F8E5M2: 0x3c}
	identityMin = [comm.NumDTypes]uint64{comm.F32: 0x7f800000, comm.F64: 0x7ff0000000000000, comm.F16: 0x7c00, comm.BF16: 0x7f80,
		comm.I8: math.MaxInt8, comm.U8: math.MaxUint8, comm.I32: math.MaxInt32, comm.U32: math.MaxUint32, comm.I64: math.MaxInt64, comm.U64: math.MaxUint64,
		comm.I16: math.MaxInt16, comm.U16: math.MaxUint16, comm.Bool: 1, comm.F8E4M3: 0x7e, comm.F8E5M2: 0x7c}
	identityMax = [comm.NumDTypes]uint64{comm.F32: 0xff800000, comm.F64: 0xfff0000000000000, comm.F16: 0xfc00, comm.BF16: 0xff80,
		comm.I8: 0x80, comm.U8: 0, comm.I32: 0x80000000, comm.U32: 0, comm.I64: 1 << 63, comm.U64: 0,
		comm.I16: 0x8000, comm.U16: 0, comm.Bool: 0, comm.F8E4M3: 0xfe, comm.F8E5M2: 0xfc}
)
