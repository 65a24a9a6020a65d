package comm

import "math"

// Conversions between the 16-bit float types and float32/float64.
//
// Narrowing rounds to nearest, ties to even, as IEEE 754 and every GPU do:
// values too large overflow to ±Inf, values too small become subnormals or
// a zero of the same sign, and a NaN stays a NaN of the same sign, quieted,
// with as much of its payload as fits. Widening to float32 is exact (every
// Float16 and BFloat16 is a float32) and keeps a NaN's bits as they are.

// f16ToF32 holds the float32 value of every Float16 bit pattern. Widening is
// the inner step of every f16 reduction, and a lookup in a table indexed by
// a uint16 needs no bounds check; 256 KiB, built once when the package loads.
var f16ToF32 = buildF16Table()

func buildF16Table() *[1 << 16]float32 {
	var t [1 << 16]float32
	for h := range t {
		t[h] = math.Float32frombits(f16BitsToF32Bits(uint16(h)))
	}
	return &t
}

// f16BitsToF32Bits widens binary16 to binary32 by moving the fields: rebias
// the exponent (15 → 127), normalize a subnormal, keep Inf and NaN payloads.
func f16BitsToF32Bits(h uint16) uint32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return sign | 0x7f800000 | mant<<13
	case exp != 0: // normal
		return sign | (exp+127-15)<<23 | mant<<13
	case mant == 0: // ±0
		return sign
	}
	// Subnormal: mant × 2^-24. Shift the leading one up to the implicit bit.
	e := uint32(127 - 15 + 1)
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return sign | e<<23 | (mant&0x3ff)<<13
}

// Float32 is the value of h; exact.
func (h Float16) Float32() float32 { return f16ToF32[h] }

// Float16From rounds f to the nearest Float16, ties to even.
func Float16From(f float32) Float16 {
	b := math.Float32bits(f)
	if h, ok := float16FromNormal(b); ok {
		return h
	}
	return float16FromRare(b)
}

// float16FromNormal is Float16From for the common case, a result that is a
// normal Float16 (from 2^-14 up to, not including, 65520, which rounds to
// +Inf because 65504 is the largest Float16 and its last bit is odd); ok is
// false otherwise. Small enough to inline into the f16 kernels.
func float16FromNormal(b uint32) (h Float16, ok bool) {
	a := b & 0x7fffffff
	// Rebias the exponent (127 → 15) in place, then round off the 13 low
	// mantissa bits: adding 0xfff plus the lowest kept bit carries exactly
	// when the dropped part is above half, or at half with the kept part odd.
	// A carry out of the mantissa correctly bumps the exponent.
	return Float16(b>>16&0x8000 | (a-0x38000000+0xfff+(a>>13&1))>>13), a-0x38800000 < 0x477ff000-0x38800000
}

// float16FromRare is Float16From outside the normal range: zero, subnormal,
// overflow, Inf and NaN.
func float16FromRare(b uint32) Float16 {
	sign := Float16(b >> 16 & 0x8000)
	a := b & 0x7fffffff
	switch {
	case a > 0x7f800000: // NaN: quiet it, keep the sign and the top of the payload
		return sign | 0x7e00 | Float16(a>>13&0x3ff)
	case a >= 0x477ff000: // rounds to 65536 or more, or is Inf
		return sign | 0x7c00
	case a < 0x33000000: // below 2^-25, half the smallest subnormal: rounds to zero
		return sign
	}
	// Subnormal result: the value is m × 2^(e-150) with m the mantissa with its
	// implicit bit; in units of 2^-24 that is m >> (126-e), rounded.
	e := a >> 23
	m := a&0x7fffff | 0x800000
	shift := 126 - e // 14 … 24
	r := m >> shift
	rem := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || rem == half && r&1 == 1 {
		r++ // may carry into 0x400, the smallest normal: still the right bits
	}
	return sign | Float16(r)
}

// Float16FromFloat64 rounds f to the nearest Float16, ties to even, in one
// step (rounding to float32 first could round twice and be off by one ulp).
func Float16FromFloat64(f float64) Float16 {
	b := math.Float64bits(f)
	sign := Float16(b >> 48 & 0x8000)
	a := b &^ (1 << 63)
	switch {
	case a > 0x7ff0000000000000: // NaN
		return sign | 0x7e00 | Float16(a>>42&0x3ff)
	case a >= 0x40effe0000000000: // 65520 or more: +Inf (65504 is odd)
		return sign | 0x7c00
	case a < 0x3f10000000000000: // below 2^-14: subnormal or zero
		// x × 2^24 is exact in float64 and RoundToEven rounds it once; the
		// integer 0…1024 is the encoding (1024 being the smallest normal).
		return sign | Float16(math.RoundToEven(math.Float64frombits(a)*(1<<24)))
	}
	// Normal: rebias (1023 → 15) and round off the 42 low mantissa bits.
	return sign | Float16((a-(1023-15)<<52+(1<<41-1)+(a>>42&1))>>42)
}

// Float32 is the value of b; exact.
func (b BFloat16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }

// BFloat16From rounds f to the nearest BFloat16, ties to even. BFloat16 has
// float32's exponent range, so only the mantissa is rounded; subnormals and
// overflow to Inf fall out of the same integer addition.
func BFloat16From(f float32) BFloat16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return BFloat16(b>>16 | 0x40) // NaN: quiet it
	}
	return BFloat16((b + 0x7fff + (b >> 16 & 1)) >> 16)
}

// BFloat16FromFloat64 rounds f to the nearest BFloat16, ties to even, in one
// step.
func BFloat16FromFloat64(f float64) BFloat16 {
	b := math.Float64bits(f)
	sign := BFloat16(b >> 48 & 0x8000)
	a := b &^ (1 << 63)
	switch {
	case a > 0x7ff0000000000000: // NaN
		return sign | 0x7fc0 | BFloat16(a>>45&0x7f)
	case a >= 0x47eff00000000000: // (2 - 2^-8) × 2^127 or more: +Inf (the largest BFloat16 is odd)
		return sign | 0x7f80
	case a < 0x3810000000000000: // below 2^-126: subnormal or zero
		return sign | BFloat16(math.RoundToEven(math.Float64frombits(a)*0x1p133))
	}
	// Normal: rebias (1023 → 127) and round off the 45 low mantissa bits.
	return sign | BFloat16((a-(1023-127)<<52+(1<<44-1)+(a>>45&1))>>45)
}
