package comm

import "math"

// Float8E4M3 is an OCP FP8 E4M3 value (CUDA's __nv_fp8_e4m3, NCCL's
// ncclFloat8e4m3), stored as its bits: a sign, 4 exponent bits (bias 7) and
// 3 mantissa bits. It has no infinities: the exponent field of all ones is
// a normal binade except for the mantissa of all ones, the only NaN (0x7f
// and 0xff). The largest finite value is 448, the smallest normal 2^-6 and
// the smallest subnormal 2^-9.
type Float8E4M3 uint8

// Float8E5M2 is an OCP FP8 E5M2 value (CUDA's __nv_fp8_e5m2, NCCL's
// ncclFloat8e5m2), stored as its bits: a sign, 5 exponent bits (bias 15)
// and 2 mantissa bits, laid out as IEEE 754 (binary16 with its low 8 bits
// dropped): ±Inf (0x7c, 0xfc) and NaNs. The largest finite value is 57344,
// the smallest normal 2^-14 and the smallest subnormal 2^-16.
type Float8E5M2 uint8

// Conversions between the fp8 types and float32/float64.
//
// Narrowing rounds to nearest, ties to even, in one step from the value
// given (a float32 widens exactly to float64 first). Values too small
// become subnormals or a zero of the same sign; a NaN becomes the quiet
// NaN of the same sign (E4M3 0x7f, E5M2 0x7e). Both formats saturate, as
// CUDA's conversions with __NV_SATFINITE do, which NCCL's fp8 kernels use
// (and the OCP FP8 specification allows): a value beyond the largest
// finite one, ±Inf included, becomes ±448 (E4M3) or ±57344 (E5M2). E4M3
// has no Inf at all; an E5M2 Inf is a value that widens to Inf, but no
// narrowing makes one.
//
// Widening to float32 is exact; E5M2's NaNs keep their payload bits.

// f8e4m3ToF32 and f8e5m2ToF32 hold the float32 value of every bit pattern.
var (
	f8e4m3ToF32 = buildFloat8Table(3, 7, true)
	f8e5m2ToF32 = buildFloat8Table(2, 15, false)
)

func buildFloat8Table(mbits uint, bias int, e4m3 bool) *[256]float32 {
	var t [256]float32
	for v := range t {
		t[v] = widenFloat8(uint8(v), mbits, bias, e4m3)
	}
	return &t
}

// widenFloat8 is the value of the fp8 bits v with mbits mantissa bits and
// the given bias; e4m3 selects E4M3's NaN (0x7f) over IEEE's Inf and NaNs.
func widenFloat8(v uint8, mbits uint, bias int, e4m3 bool) float32 {
	sign := uint32(v&0x80) << 24
	mag := v & 0x7f
	exp := int(mag >> mbits)
	mant := uint32(mag) & (1<<mbits - 1)
	switch {
	case e4m3 && mag == 0x7f:
		return math.Float32frombits(sign | 0x7fc00000)
	case !e4m3 && exp == 1<<(7-mbits)-1: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<(23-mbits))
	}
	var f float64
	if exp == 0 {
		f = math.Ldexp(float64(mant), 1-bias-int(mbits))
	} else {
		f = math.Ldexp(float64(mant|1<<mbits), exp-bias-int(mbits))
	}
	return math.Float32frombits(sign | math.Float32bits(float32(f)))
}

// narrowFloat8 rounds f to the fp8 format with mbits mantissa bits and the
// given bias, to nearest with ties to even; maxEnc is the largest finite
// magnitude's bits, which overflow saturates to, and nan the quiet NaN's.
func narrowFloat8(f float64, mbits uint, bias int, maxEnc, nan uint8) uint8 {
	b := math.Float64bits(f)
	sign := uint8(b>>56) & 0x80
	a := b &^ (1 << 63)
	overflow := sign | maxEnc
	switch {
	case a > 0x7ff0000000000000:
		return sign | nan
	case a == 0x7ff0000000000000:
		return overflow
	case a < 0x0010000000000000: // zero or a float64 subnormal: far below 2^-17
		return sign
	}
	e := int(a>>52) - 1023
	m := a&(1<<52-1) | 1<<52 // the value is m × 2^(e-52)
	emin := 1 - bias         // the exponent of the smallest normal
	shift := 52 - mbits      // to a normal's mantissa
	if e < emin {
		// Subnormal: in units of the smallest subnormal, 2^(emin-mbits).
		shift += uint(emin - e)
	}
	if shift > 53 { // below half the smallest subnormal
		return sign
	}
	r := m >> shift
	rem := m & (1<<shift - 1)
	half := uint64(1) << (shift - 1)
	if rem > half || rem == half && r&1 == 1 {
		r++
	}
	// A subnormal's bits are its count (a count of 2^mbits is the smallest
	// normal, whose bits are the same); a normal's are its biased exponent
	// and mantissa, where a rounding carry bumps the exponent by addition.
	enc := r
	if e >= emin {
		enc = uint64(e+bias-1)<<mbits + r
	}
	if enc > uint64(maxEnc) {
		return overflow
	}
	return sign | uint8(enc)
}

// Float32 is the value of x; exact (the NaN 0x7f/0xff is a quiet NaN).
func (x Float8E4M3) Float32() float32 { return f8e4m3ToF32[x] }

// Float8E4M3From rounds f to the nearest Float8E4M3, ties to even,
// saturating at ±448.
func Float8E4M3From(f float32) Float8E4M3 { return Float8E4M3FromFloat64(float64(f)) }

// Float8E4M3FromFloat64 rounds f to the nearest Float8E4M3, ties to even,
// saturating at ±448, in one step.
func Float8E4M3FromFloat64(f float64) Float8E4M3 {
	return Float8E4M3(narrowFloat8(f, 3, 7, 0x7e, 0x7f))
}

// Float32 is the value of x; exact.
func (x Float8E5M2) Float32() float32 { return f8e5m2ToF32[x] }

// Float8E5M2From rounds f to the nearest Float8E5M2, ties to even,
// saturating at ±57344.
func Float8E5M2From(f float32) Float8E5M2 { return Float8E5M2FromFloat64(float64(f)) }

// Float8E5M2FromFloat64 rounds f to the nearest Float8E5M2, ties to even,
// saturating at ±57344, in one step.
func Float8E5M2FromFloat64(f float64) Float8E5M2 {
	return Float8E5M2(narrowFloat8(f, 2, 15, 0x7b, 0x7e))
}
