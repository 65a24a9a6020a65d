package tier

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// The conversions are checked against a reference written from the
// definitions: decoding by the textbook formula, and rounding by searching
// the sorted list of every representable value for the two neighbours of x.

// halfFormat is what the reference knows about a 16-bit float format.
type halfFormat struct {
	name   string
	inf    uint16               // the bits of +Inf; the bits below it are the finite non-negative values, in order
	qbit   uint16               // the quiet bit of a NaN
	decode func(uint16) float64 // textbook decoding
	mags   []float64            // mags[k] is the value of bits k for k < inf; mags[inf] is the next power of two above the largest finite
}

func newHalfFormat(name string, inf, qbit uint16, decode func(uint16) float64, beyond float64) *halfFormat {
	f := &halfFormat{name: name, inf: inf, qbit: qbit, decode: decode}
	for k := uint16(0); k < inf; k++ {
		f.mags = append(f.mags, decode(k))
	}
	f.mags = append(f.mags, beyond)
	if !sort.Float64sAreSorted(f.mags) {
		panic(name + ": reference values are not sorted")
	}
	return f
}

var (
	refF16 = newHalfFormat("f16", 0x7c00, 0x0200, func(h uint16) float64 {
		sign, e, m := 1.0, int(h>>10&0x1f), float64(h&0x3ff)
		if h&0x8000 != 0 {
			sign = -1
		}
		switch {
		case e == 0x1f && m == 0:
			return math.Inf(int(sign))
		case e == 0x1f:
			return math.NaN()
		case e == 0:
			return sign * math.Ldexp(m, -24)
		}
		return sign * math.Ldexp(1024+m, e-25)
	}, 65536)
	refBF16 = newHalfFormat("bf16", 0x7f80, 0x0040, func(h uint16) float64 {
		sign, e, m := 1.0, int(h>>7&0xff), float64(h&0x7f)
		if h&0x8000 != 0 {
			sign = -1
		}
		switch {
		case e == 0xff && m == 0:
			return math.Inf(int(sign))
		case e == 0xff:
			return math.NaN()
		case e == 0:
			return sign * math.Ldexp(m, -133)
		}
		return sign * math.Ldexp(128+m, e-134)
	}, 0x1p128)
)

// round is the reference rounding of a non-NaN x: nearest, ties to the
// even bit pattern, ±Inf beyond the largest finite value's half ulp.
func (f *halfFormat) round(x float64) uint16 {
	var sign uint16
	if math.Signbit(x) {
		sign, x = 0x8000, -x
	}
	if x >= f.mags[f.inf] {
		return sign | f.inf
	}
	k := sort.SearchFloat64s(f.mags, x) // first k with mags[k] >= x
	if f.mags[k] == x {
		return sign | uint16(k)
	}
	lo, hi := k-1, k
	mid := (f.mags[lo] + f.mags[hi]) / 2 // exact: both have at most 12 significant bits
	switch {
	case x < mid:
		return sign | uint16(lo)
	case x > mid:
		return sign | uint16(hi)
	case lo%2 == 0:
		return sign | uint16(lo)
	}
	return sign | uint16(hi)
}

// roundQuo is the reference rounding of x/n (x finite and not zero, n ≥ 1).
// The float64 quotient's rounding is a guess that can only be off by one
// value; the exact comparisons of x with midpoint × n settle it (a midpoint
// has at most 12 significant bits and n is small, so the product is exact).
func (f *halfFormat) roundQuo(x float64, n int) uint16 {
	guess := f.round(x / float64(n))
	sign := guess & 0x8000
	ax := math.Abs(x)
	k := int(guess &^ 0x8000)
	mid := func(i int) float64 { return (f.mags[i] + f.mags[i+1]) / 2 * float64(n) }
	for {
		if k > 0 {
			if m := mid(k - 1); ax < m || ax == m && k%2 == 1 {
				k--
				continue
			}
		}
		if k < int(f.inf) {
			if m := mid(k); ax > m || ax == m && k%2 == 1 {
				k++
				continue
			}
		}
		return sign | uint16(k)
	}
}

func (f *halfFormat) isNaN(h uint16) bool { return h&0x7fff > f.inf }

func (f *halfFormat) value(h uint16) float32 {
	if f.name == "f16" {
		return comm.Float16(h).Float32()
	}
	return comm.BFloat16(h).Float32()
}

func (f *halfFormat) from32(x float32) uint16 {
	if f.name == "f16" {
		return uint16(comm.Float16From(x))
	}
	return uint16(comm.BFloat16From(x))
}

func (f *halfFormat) from64(x float64) uint16 {
	if f.name == "f16" {
		return uint16(comm.Float16FromFloat64(x))
	}
	return uint16(comm.BFloat16FromFloat64(x))
}

var halfFormats = []*halfFormat{refF16, refBF16}

// TestHalfDecodeExhaustive: every bit pattern widens to the textbook value;
// NaNs keep their sign and payload.
func TestHalfDecodeExhaustive(t *testing.T) {
	for _, f := range halfFormats {
		shift := 13
		if f.name == "bf16" {
			shift = 16
		}
		for i := range 1 << 16 {
			h := uint16(i)
			got := f.value(h)
			if f.isNaN(h) {
				want := uint32(h&0x8000)<<16 | 0x7f800000 | uint32(h&(f.inf^0x7fff))<<shift
				if f.name == "bf16" {
					want = uint32(h) << 16
				}
				if math.Float32bits(got) != want {
					t.Fatalf("%s %#04x: NaN widened to %#08x, want %#08x", f.name, h, math.Float32bits(got), want)
				}
				continue
			}
			want := f.decode(h)
			if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
				t.Fatalf("%s %#04x: got %v, want %v", f.name, h, got, want)
			}
		}
	}
}

// TestHalfRoundTripExhaustive: narrowing a widened value gives the same bits
// back, through float32 and float64; a NaN comes back quieted.
func TestHalfRoundTripExhaustive(t *testing.T) {
	for _, f := range halfFormats {
		for i := range 1 << 16 {
			h := uint16(i)
			want := h
			if f.isNaN(h) {
				want |= f.qbit
			}
			x := f.value(h)
			if got := f.from32(x); got != want {
				t.Fatalf("%s %#04x: from float32 %v gives %#04x, want %#04x", f.name, h, x, got, want)
			}
			if got := f.from64(float64(x)); got != want {
				t.Fatalf("%s %#04x: from float64 %v gives %#04x, want %#04x", f.name, h, x, got, want)
			}
		}
	}
}

// TestHalfRoundingExhaustive: between every pair of neighbouring values (and
// beyond the largest, towards Inf), the midpoint and the numbers just either
// side of it round as the reference says: ties to even, overflow to Inf,
// subnormals and the underflow to zero included, both signs.
func TestHalfRoundingExhaustive(t *testing.T) {
	for _, f := range halfFormats {
		for k := 0; k < int(f.inf); k++ {
			lo, hi := f.mags[k], f.mags[k+1]
			mid := (lo + hi) / 2
			points := []float64{lo, mid, math.Nextafter(mid, 0), math.Nextafter(mid, math.Inf(1)),
				math.Nextafter(hi, 0), math.Nextafter(lo, math.Inf(1))}
			mid32 := float32(mid) // exact
			points32 := []float32{mid32, math.Nextafter32(mid32, 0), math.Nextafter32(mid32, float32(math.Inf(1))),
				math.Nextafter32(float32(hi), 0)}
			for _, sign := range []float64{1, -1} {
				for _, x := range points {
					x *= sign
					if got, want := f.from64(x), f.round(x); got != want {
						t.Fatalf("%s from float64 %v (%#x): got %#04x, want %#04x", f.name, x, math.Float64bits(x), got, want)
					}
				}
				for _, x := range points32 {
					x *= float32(sign)
					if got, want := f.from32(x), f.round(float64(x)); got != want {
						t.Fatalf("%s from float32 %v (%#x): got %#04x, want %#04x", f.name, x, math.Float32bits(x), got, want)
					}
				}
			}
		}
	}
}

// TestHalfRoundingRandom: random float32 bit patterns (every exponent) and
// random float64 values around the formats' ranges.
func TestHalfRoundingRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	n := 100000
	if testing.Short() {
		n = 10000
	}
	for _, f := range halfFormats {
		emin, emax := -30, 20
		if f.name == "bf16" {
			emin, emax = -140, 130
		}
		for range n {
			x32 := math.Float32frombits(rng.Uint32())
			if x32 == x32 { // NaN is checked elsewhere
				if got, want := f.from32(x32), f.round(float64(x32)); got != want {
					t.Fatalf("%s from float32 %v (%#x): got %#04x, want %#04x", f.name, x32, math.Float32bits(x32), got, want)
				}
			}
			x := math.Ldexp(1+rng.Float64(), emin+rng.IntN(emax-emin))
			if rng.IntN(2) == 0 {
				x = -x
			}
			if got, want := f.from64(x), f.round(x); got != want {
				t.Fatalf("%s from float64 %v (%#x): got %#04x, want %#04x", f.name, x, math.Float64bits(x), got, want)
			}
		}
	}
}

func TestHalfSpecialCases(t *testing.T) {
	f32 := func(b uint32) float32 { return math.Float32frombits(b) }
	f64 := func(b uint64) float64 { return math.Float64frombits(b) }
	cases := []struct {
		name      string
		f16, bf16 uint16 // expected from the float64 x (and from float32(x) when exact32)
		x         float64
		exact32   bool
	}{
		{"one", 0x3c00, 0x3f80, 1, true},
		{"minus zero", 0x8000, 0x8000, math.Copysign(0, -1), true},
		{"largest f16", 0x7bff, 0x4780, 65504, true},
		{"just below f16 overflow", 0x7bff, 0x4780, math.Nextafter(65520, 0), false},
		{"f16 overflow tie goes to Inf", 0x7c00, 0x4780, 65520, true},
		{"f16 negative overflow", 0xfc00, 0xc974, -1e6, true},
		{"tie to even down", 0x3c00, 0x3f80, 1 + 0x1p-11, true},
		{"tie to even up", 0x3c02, 0x3f80, 1 + 3*0x1p-11, true},
		{"f16 smallest subnormal", 0x0001, 0x3380, 0x1p-24, true},
		{"half the smallest subnormal ties to zero", 0x0000, 0x3300, 0x1p-25, true},
		{"just above half the smallest subnormal", 0x0001, 0x3300, math.Nextafter(0x1p-25, 1), false},
		{"negative tiny keeps its sign", 0x8000, 0xa690, -1e-15, false},
		{"f16 subnormal tie to even", 0x0002, 0x3420, 0x1p-24 * 2.5, true},
		{"f16 subnormal rounds up into the normals", 0x0400, 0x3880, 0x1p-14 - 0x1p-26, true},
		{"bf16 largest", 0x7c00, 0x7f7f, f64(0x47efe00000000000), true},
		{"bf16 overflow tie goes to Inf", 0x7c00, 0x7f80, f64(0x47eff00000000000), true},
		{"float32 max", 0x7c00, 0x7f80, math.MaxFloat32, true},
		{"bf16 subnormal", 0x0000, 0x0001, 0x1p-133, true},
		{"bf16 half subnormal ties to zero", 0x0000, 0x0000, 0x1p-134, true},
		{"bf16 smallest normal", 0x0000, 0x0080, 0x1p-126, true},
		{"f16 double rounding trap", 0x3c01, 0x3f80, 1 + 0x1p-11 + 0x1p-40, false},
		{"bf16 double rounding trap", 0x3c04, 0x3f81, 1 + 0x1p-8 + 0x1p-40, false},
		{"+Inf", 0x7c00, 0x7f80, math.Inf(1), true},
		{"-Inf", 0xfc00, 0xff80, math.Inf(-1), true},
	}
	for _, c := range cases {
		if got := comm.Float16FromFloat64(c.x); uint16(got) != c.f16 {
			t.Errorf("%s: Float16FromFloat64(%v) = %#04x, want %#04x", c.name, c.x, got, c.f16)
		}
		if got := comm.BFloat16FromFloat64(c.x); uint16(got) != c.bf16 {
			t.Errorf("%s: BFloat16FromFloat64(%v) = %#04x, want %#04x", c.name, c.x, got, c.bf16)
		}
		if c.exact32 {
			if float64(float32(c.x)) != c.x && !math.IsInf(c.x, 0) {
				t.Fatalf("%s: %v is not a float32", c.name, c.x)
			}
			if got := comm.Float16From(float32(c.x)); uint16(got) != c.f16 {
				t.Errorf("%s: Float16From(%v) = %#04x, want %#04x", c.name, c.x, got, c.f16)
			}
			if got := comm.BFloat16From(float32(c.x)); uint16(got) != c.bf16 {
				t.Errorf("%s: BFloat16From(%v) = %#04x, want %#04x", c.name, c.x, got, c.bf16)
			}
		}
	}
	// NaNs: stay NaN (a signaling NaN whose payload would shift out must not
	// become Inf), keep the sign, come out quiet.
	for _, b := range []uint32{0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fbfffff, 0x7f802000} {
		h, bf := comm.Float16From(f32(b)), comm.BFloat16From(f32(b))
		if h&0x7fff <= 0x7c00 || h&0x0200 == 0 || (h&0x8000 != 0) != (b>>31 == 1) {
			t.Errorf("Float16From(NaN %#08x) = %#04x, want a quiet NaN of the same sign", b, h)
		}
		if bf&0x7fff <= 0x7f80 || bf&0x0040 == 0 || (bf&0x8000 != 0) != (b>>31 == 1) {
			t.Errorf("BFloat16From(NaN %#08x) = %#04x, want a quiet NaN of the same sign", b, bf)
		}
	}
	for _, b := range []uint64{0x7ff8000000000000, 0xfff8000000000000, 0x7ff0000000000001, 0xfff0000000000001} {
		h, bf := comm.Float16FromFloat64(f64(b)), comm.BFloat16FromFloat64(f64(b))
		if h&0x7fff <= 0x7c00 || h&0x0200 == 0 || (h&0x8000 != 0) != (b>>63 == 1) {
			t.Errorf("Float16FromFloat64(NaN %#016x) = %#04x, want a quiet NaN of the same sign", b, h)
		}
		if bf&0x7fff <= 0x7f80 || bf&0x0040 == 0 || (bf&0x8000 != 0) != (b>>63 == 1) {
			t.Errorf("BFloat16FromFloat64(NaN %#016x) = %#04x, want a quiet NaN of the same sign", b, bf)
		}
	}
}
