package commtest

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/hiercomm/hiercomm/comm"
)

// elem is what the reference needs to know about a dtype: its width, whether
// it is a float (and its field widths) or a signed integer. Values travel in
// the reference as float64 (floats) or as their bits in a uint64 (integers,
// and the raw bits of the collectives that only move data).
type elem struct {
	dt     comm.DType
	size   int  // bytes
	width  uint // bits
	float  bool
	signed bool
	ebits  uint // floats: exponent bits
	mbits  uint // floats: stored mantissa bits
	// finite: the float format has no Inf, and its top binade is finite
	// but for one NaN (E4M3: 0x7f and 0xff; it saturates at ±448).
	finite bool
	// boolean: Bool, whose elements are 0 or 1 and whose ops are logical.
	boolean bool
}

func elemOf(dt comm.DType) elem {
	e := elem{dt: dt, size: dt.Size(), width: uint(dt.Size()) * 8}
	switch dt {
	case comm.F16:
		e.float, e.ebits, e.mbits = true, 5, 10
	case comm.BF16:
		e.float, e.ebits, e.mbits = true, 8, 7
	case comm.F32:
		e.float, e.ebits, e.mbits = true, 8, 23
	case comm.F64:
		e.float, e.ebits, e.mbits = true, 11, 52
	case comm.F8E4M3:
		e.float, e.ebits, e.mbits, e.finite = true, 4, 3, true
	case comm.F8E5M2:
		e.float, e.ebits, e.mbits = true, 5, 2
	case comm.I8, comm.I16, comm.I32, comm.I64:
		e.signed = true
	case comm.Bool:
		e.boolean = true
	}
	return e
}

// mask is the low width bits.
func (e elem) mask() uint64 {
	if e.width == 64 {
		return math.MaxUint64
	}
	return 1<<e.width - 1
}

// get returns the bits of element i of b (host memory, native byte order).
func (e elem) get(b []byte, i int) uint64 {
	switch e.size {
	case 1:
		return uint64(b[i])
	case 2:
		return uint64(binary.NativeEndian.Uint16(b[2*i:]))
	case 4:
		return uint64(binary.NativeEndian.Uint32(b[4*i:]))
	default:
		return binary.NativeEndian.Uint64(b[8*i:])
	}
}

// put stores the low width bits of v as element i of b.
func (e elem) put(b []byte, i int, v uint64) {
	switch e.size {
	case 1:
		b[i] = byte(v)
	case 2:
		binary.NativeEndian.PutUint16(b[2*i:], uint16(v))
	case 4:
		binary.NativeEndian.PutUint32(b[4*i:], uint32(v))
	default:
		binary.NativeEndian.PutUint64(b[8*i:], v)
	}
}

// view is b as a slice of T, for the bulk loops below. b must be aligned
// for T: it always is here (Go allocates a []byte of a multiple of 2, 4 or
// 8 bytes at that alignment, and Memory's buffers are 8-aligned), and
// checkptr (-race) verifies it.
func view[T uint8 | uint16 | uint32 | uint64](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

// getAll sets v[i] to the bits of element i of b.
func (e elem) getAll(v []uint64, b []byte) {
	switch e.size {
	case 1:
		for i, x := range b[:len(v)] {
			v[i] = uint64(x)
		}
	case 2:
		for i, x := range view[uint16](b)[:len(v)] {
			v[i] = uint64(x)
		}
	case 4:
		for i, x := range view[uint32](b)[:len(v)] {
			v[i] = uint64(x)
		}
	default:
		copy(v, view[uint64](b)[:len(v)])
	}
}

// decodeFloats sets v[i] to the value of element i of b, a float dtype.
func (e elem) decodeFloats(v []float64, b []byte) {
	switch e.dt {
	case comm.F64:
		for i, x := range view[uint64](b)[:len(v)] {
			v[i] = math.Float64frombits(x)
		}
	case comm.F32:
		for i, x := range view[uint32](b)[:len(v)] {
			v[i] = float64(math.Float32frombits(x))
		}
	case comm.BF16:
		for i, x := range view[uint16](b)[:len(v)] {
			v[i] = float64(math.Float32frombits(uint32(x) << 16))
		}
	case comm.F8E4M3, comm.F8E5M2:
		t := fp8Values(e.dt)
		for i, x := range b[:len(v)] {
			v[i] = t[x]
		}
	default:
		t := f16Values()
		for i, x := range view[uint16](b)[:len(v)] {
			v[i] = t[x]
		}
	}
}

// putAll stores v[i] as element i of b.
func (e elem) putAll(b []byte, v []uint64) {
	switch e.size {
	case 1:
		for i, x := range v {
			b[i] = byte(x)
		}
	case 2:
		d := view[uint16](b)[:len(v)]
		for i, x := range v {
			d[i] = uint16(x)
		}
	case 4:
		d := view[uint32](b)[:len(v)]
		for i, x := range v {
			d[i] = uint32(x)
		}
	default:
		copy(view[uint64](b), v)
	}
}

// sext is the integer value of the bits v: sign-extended for signed types.
func (e elem) sext(v uint64) int64 {
	s := 64 - e.width
	return int64(v<<s) >> s
}

// less orders integer bits as the dtype does.
func (e elem) less(a, b uint64) bool {
	if e.signed {
		return e.sext(a) < e.sext(b)
	}
	return a&e.mask() < b&e.mask()
}

// fromFloat rounds f to the dtype, to nearest with ties to even, in one step,
// and returns its bits. A NaN becomes the dtype's quiet NaN.
func (e elem) fromFloat(f float64) uint64 {
	switch e.dt {
	case comm.F64:
		return math.Float64bits(f)
	case comm.F32:
		return uint64(math.Float32bits(float32(f))) // Go converts to nearest even
	}
	return e.narrow(f)
}

// narrow rounds f to the dtype, a float narrower than float32. The fp8
// types saturate (comm.Float8E5M2From: E5M2's largest value is 57344),
// but for E5M2's ±Inf, which only the identity of Min and Max is here:
// those ops never round, and the suite's inputs are finite.
func (e elem) narrow(f float64) uint64 {
	switch {
	case e.finite:
		return narrowE4M3(f)
	case e.dt == comm.F8E5M2 && !math.IsNaN(f) && !math.IsInf(f, 0) && math.Abs(f) >= 57344:
		return narrow(math.Copysign(57344, f), e.ebits, e.mbits)
	}
	return narrow(f, e.ebits, e.mbits)
}

// fromFloats sets dst[i] to fromFloat(src[i]).
func (e elem) fromFloats(dst []uint64, src []float64) {
	switch e.dt {
	case comm.F64:
		for i, f := range src {
			dst[i] = math.Float64bits(f)
		}
	case comm.F32:
		for i, f := range src {
			dst[i] = uint64(math.Float32bits(float32(f)))
		}
	case comm.BF16:
		for i, f := range src {
			// Fast path: f is a bfloat16 already (the inputs are), so its
			// float32 is exact and the low half of the bits is zero.
			if b := math.Float32bits(float32(f)); float64(float32(f)) == f && b&0xffff == 0 {
				dst[i] = uint64(b >> 16)
			} else {
				dst[i] = narrow(f, e.ebits, e.mbits)
			}
		}
	case comm.F8E4M3, comm.F8E5M2:
		for i, f := range src {
			dst[i] = e.narrow(f)
		}
	default: // F16
		for i, f := range src {
			// Fast path: f is a normal binary16 or zero (the inputs are):
			// move the fields of its exact float32.
			b := math.Float32bits(float32(f))
			exp := b >> 23 & 0xff
			switch {
			case float64(float32(f)) != f || b&0x1fff != 0:
				dst[i] = narrow(f, e.ebits, e.mbits)
			case b&0x7fffffff == 0:
				dst[i] = uint64(b >> 16)
			case exp >= 127-14 && exp <= 127+15:
				dst[i] = uint64(b>>16&0x8000 | (exp-112)<<10 | b>>13&0x3ff)
			default:
				dst[i] = narrow(f, e.ebits, e.mbits)
			}
		}
	}
}

// toFloat is the value of the bits v of a float dtype; exact.
func (e elem) toFloat(v uint64) float64 {
	switch e.dt {
	case comm.F64:
		return math.Float64frombits(v)
	case comm.F32:
		return float64(math.Float32frombits(uint32(v)))
	case comm.BF16:
		return float64(math.Float32frombits(uint32(v) << 16)) // bfloat16 is the top half of a float32
	case comm.F8E4M3, comm.F8E5M2:
		return fp8Values(e.dt)[uint8(v)]
	}
	return f16Values()[uint16(v)]
}

// f16Values holds the value of every binary16 bit pattern, from widen.
var f16Values = sync.OnceValue(func() *[1 << 16]float64 {
	var t [1 << 16]float64
	for b := range t {
		t[b] = widen(uint64(b), 5, 10)
	}
	return &t
})

// fp8Values holds the value of every bit pattern of the fp8 dtype dt, from
// widen (E4M3's top binade, which widen would take for Inf and NaN, from
// the binade below it, doubled).
func fp8Values(dt comm.DType) *[256]float64 {
	if dt == comm.F8E4M3 {
		return e4m3Values()
	}
	return e5m2Values()
}

var (
	e4m3Values = sync.OnceValue(func() *[256]float64 {
		var t [256]float64
		for b := range t {
			switch {
			case b&0x7f == 0x7f:
				t[b] = math.NaN()
			case b&0x78 == 0x78: // exponent field 15: 2^8 × 1.m
				t[b] = 2 * widen(uint64(b)-0x08, 4, 3)
			default:
				t[b] = widen(uint64(b), 4, 3)
			}
		}
		return &t
	})
	e5m2Values = sync.OnceValue(func() *[256]float64 {
		var t [256]float64
		for b := range t {
			t[b] = widen(uint64(b), 5, 2)
		}
		return &t
	})
)

// narrowE4M3 rounds f to E4M3, to nearest with ties to even: narrow, but
// with E4M3's top binade (256 to 448) finite, saturating at ±448 (as
// comm.Float8E4M3From: 448 is the largest value, and what rounds above
// it, Inf included, becomes it), and a NaN is 0x7f with f's sign.
func narrowE4M3(f float64) uint64 {
	var sign uint64
	if math.Signbit(f) {
		sign = 0x80
	}
	a := math.Abs(f)
	switch {
	case math.IsNaN(f):
		return sign | 0x7f
	case a >= 448:
		return sign | 0x7e
	case a >= 256:
		// narrow of a/2 with one more exponent step: the binade [256, 448]
		// has the spacing 32, and 2^7 × (1 + m/8) narrows exactly as a/2.
		return sign | (narrow(a/2, 4, 3) + 0x08)
	}
	return sign | narrow(a, 4, 3)
}

// isNaN reports whether the bits v of a float dtype are a NaN.
func (e elem) isNaN(v uint64) bool {
	if e.finite {
		return v&0x7f == 0x7f
	}
	expMask := (uint64(1)<<e.ebits - 1) << e.mbits
	return v&expMask == expMask && v&(1<<e.mbits-1) != 0
}

// format renders the bits v for a failure message: the value and the bits.
func (e elem) format(v uint64) string {
	switch {
	case e.float:
		return fmt.Sprintf("%v (0x%0*x)", e.toFloat(v), e.size*2, v)
	case e.signed:
		return fmt.Sprint(e.sext(v))
	}
	return fmt.Sprint(v & e.mask())
}

// narrow rounds f to the binary format with ebits exponent bits and mbits
// stored mantissa bits (binary16: 5, 10; bfloat16: 8, 7), to nearest with
// ties to even, and returns the bits. It is written for clarity, not speed:
// scaling by a power of two is exact in float64, so math.RoundToEven of the
// scaled value is the one rounding step.
func narrow(f float64, ebits, mbits uint) uint64 {
	bias := 1<<(ebits-1) - 1
	var sign uint64
	if math.Signbit(f) {
		sign = 1 << (ebits + mbits)
	}
	inf := (uint64(1)<<ebits - 1) << mbits
	switch {
	case math.IsNaN(f):
		return sign | inf | 1<<(mbits-1) // quiet NaN
	case math.IsInf(f, 0):
		return sign | inf
	}
	a := math.Abs(f)
	emin := 1 - bias // exponent of the smallest normal
	if a < math.Ldexp(1, emin) {
		// Zero or subnormal: a count of the smallest subnormal, 2^(emin-mbits).
		// A count of 2^mbits is the smallest normal, whose bits are the same.
		return sign | uint64(math.RoundToEven(math.Ldexp(a, int(mbits)-emin)))
	}
	_, exp := math.Frexp(a) // a = frac × 2^exp, frac in [0.5, 1)
	e := exp - 1
	m := math.RoundToEven(math.Ldexp(a, int(mbits)-e)) // in [2^mbits, 2^(mbits+1)]
	if m == math.Ldexp(1, int(mbits)+1) {
		m /= 2
		e++
	}
	if e > bias {
		return sign | inf
	}
	return sign | uint64(e+bias)<<mbits | (uint64(m) - 1<<mbits)
}

// widen is the value of the bits v of the binary format with ebits exponent
// and mbits stored mantissa bits; exact.
func widen(v uint64, ebits, mbits uint) float64 {
	bias := 1<<(ebits-1) - 1
	exp := int(v>>mbits) & (1<<ebits - 1)
	mant := v & (1<<mbits - 1)
	neg := v>>(ebits+mbits)&1 == 1
	var f float64
	switch exp {
	case 1<<ebits - 1:
		if mant != 0 {
			return math.NaN()
		}
		f = math.Inf(1)
	case 0:
		f = math.Ldexp(float64(mant), 1-bias-int(mbits))
	default:
		f = math.Ldexp(float64(mant|1<<mbits), exp-bias-int(mbits))
	}
	if neg {
		f = -f
	}
	return f
}
