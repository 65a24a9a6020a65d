package tier

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// The fp8 conversions and kernels are checked against a reference written
// from the OCP FP8 definitions, as the 16-bit ones are (half_test.go):
// decoding by the textbook formula, rounding by searching the sorted list
// of every finite magnitude for the two neighbours of x.

// fp8Ref is what the reference knows about an fp8 format.
type fp8Ref struct {
	name   string
	ebits  int
	bias   int
	maxEnc uint8     // the bits of the largest finite magnitude
	e4m3   bool      // no Inf; the only NaN is 0x7f (else IEEE's Infs and NaNs)
	mags   []float64 // mags[k] is the value of bits k, for k ≤ maxEnc
}

func newFP8Ref(name string, ebits, bias int, maxEnc uint8, e4m3 bool) *fp8Ref {
	f := &fp8Ref{name: name, ebits: ebits, bias: bias, maxEnc: maxEnc, e4m3: e4m3}
	for k := 0; k <= int(maxEnc); k++ {
		f.mags = append(f.mags, f.decode(uint8(k)))
	}
	if !sort.Float64sAreSorted(f.mags) {
		panic(name + ": reference values are not sorted")
	}
	return f
}

var (
	refE4M3 = newFP8Ref("f8e4m3", 4, 7, 0x7e, true)
	refE5M2 = newFP8Ref("f8e5m2", 5, 15, 0x7b, false)
)

// decode is the textbook value of bits v.
func (f *fp8Ref) decode(v uint8) float64 {
	mbits := 7 - f.ebits
	sign, e, m := 1.0, int(v>>mbits)&(1<<f.ebits-1), float64(int(v)&(1<<mbits-1))
	if v&0x80 != 0 {
		sign = -1
	}
	switch {
	case f.e4m3 && v&0x7f == 0x7f: // E4M3's only NaN
		return math.NaN()
	case !f.e4m3 && e == 1<<f.ebits-1 && m == 0:
		return math.Inf(int(sign))
	case !f.e4m3 && e == 1<<f.ebits-1:
		return math.NaN()
	case e == 0:
		return sign * math.Ldexp(m, 1-f.bias-mbits)
	}
	return sign * math.Ldexp(math.Ldexp(1, mbits)+m, e-f.bias-mbits)
}

// round is the reference rounding of a non-NaN x: nearest, ties to the even
// bit pattern; beyond the largest finite value (Inf too), that value.
func (f *fp8Ref) round(x float64) uint8 {
	var sign uint8
	if math.Signbit(x) {
		sign, x = 0x80, -x
	}
	if x > f.mags[f.maxEnc] {
		return sign | f.maxEnc
	}
	k := sort.SearchFloat64s(f.mags, x) // first k with mags[k] >= x
	if f.mags[k] == x || k == 0 {
		return sign | uint8(k)
	}
	lo, hi := f.mags[k-1], f.mags[k]
	switch {
	case x-lo < hi-x:
		return sign | uint8(k-1)
	case x-lo > hi-x:
		return sign | uint8(k)
	case k%2 == 0:
		return sign | uint8(k)
	}
	return sign | uint8(k-1)
}

func (f *fp8Ref) isNaN(v uint8) bool { return math.IsNaN(f.decode(v)) }

func fp8RefOf(dt comm.DType) *fp8Ref {
	if dt == comm.F8E4M3 {
		return refE4M3
	}
	return refE5M2
}

// fp8Convert is comm's conversions of the fp8 dtype dt.
func fp8Convert(dt comm.DType) (widen func(uint8) float32, from32 func(float32) uint8, from64 func(float64) uint8) {
	if dt == comm.F8E4M3 {
		return func(v uint8) float32 { return comm.Float8E4M3(v).Float32() },
			func(f float32) uint8 { return uint8(comm.Float8E4M3From(f)) },
			func(f float64) uint8 { return uint8(comm.Float8E4M3FromFloat64(f)) }
	}
	return func(v uint8) float32 { return comm.Float8E5M2(v).Float32() },
		func(f float32) uint8 { return uint8(comm.Float8E5M2From(f)) },
		func(f float64) uint8 { return uint8(comm.Float8E5M2FromFloat64(f)) }
}

// TestFloat8Conversions: every bit pattern widens to its textbook value and
// narrows back to itself; every midpoint between neighbours, the values a
// little either side of it, and random values of every magnitude round as
// the reference does; NaN, Inf and overflow follow the documented rules.
func TestFloat8Conversions(t *testing.T) {
	for _, dt := range []comm.DType{comm.F8E4M3, comm.F8E5M2} {
		ref := fp8RefOf(dt)
		widen, from32, from64 := fp8Convert(dt)
		check := func(x float64) {
			t.Helper()
			want := ref.round(x)
			if got := from64(x); got != want {
				t.Fatalf("%v from float64 %v = %#x, want %#x", dt, x, got, want)
			}
			if float64(float32(x)) == x {
				if got := from32(float32(x)); got != want {
					t.Fatalf("%v from float32 %v = %#x, want %#x", dt, x, got, want)
				}
			}
		}
		for v := range 256 {
			b := uint8(v)
			x := ref.decode(b)
			got := widen(b)
			if math.IsNaN(x) {
				if !math.IsNaN(float64(got)) || math.Signbit(float64(got)) != (b&0x80 != 0) {
					t.Fatalf("%v %#x widens to %v, want a NaN of its sign", dt, b, got)
				}
				if n := from32(got); !ref.isNaN(n) || n&0x80 != b&0x80 {
					t.Fatalf("%v NaN %#x narrows back to %#x", dt, b, n)
				}
				continue
			}
			if float64(got) != x || math.Signbit(float64(got)) != math.Signbit(x) {
				t.Fatalf("%v %#x widens to %v, want %v", dt, b, got, x)
			}
			want := b
			if math.IsInf(x, 0) { // E5M2's Inf saturates
				want = b&0x80 | ref.maxEnc
			}
			if n := from32(got); n != want {
				t.Fatalf("%v %#x (%v) narrows back to %#x, want %#x", dt, b, x, n, want)
			}
		}
		for k := 1; k < len(ref.mags); k++ {
			lo, hi := ref.mags[k-1], ref.mags[k]
			mid := (lo + hi) / 2
			for _, x := range []float64{mid, math.Nextafter(mid, 0), math.Nextafter(mid, math.Inf(1)),
				float64(math.Nextafter32(float32(mid), 0)), float64(math.Nextafter32(float32(mid), float32(math.Inf(1))))} {
				check(x)
				check(-x)
			}
		}
		top := ref.mags[len(ref.mags)-1]
		for _, x := range []float64{top, top * 1.0625, top * 1.125, top * 1.5, top * 4, 1e300, math.Inf(1), math.SmallestNonzeroFloat64, 1e-30} {
			check(x)
			check(-x)
		}
		rng := rand.New(rand.NewPCG(31, uint64(dt)))
		for range 100000 {
			x := math.Ldexp(rng.Float64()+0.5, rng.IntN(40)-25)
			check(x)
			check(-x)
		}
		if n := from64(math.NaN()); !ref.isNaN(n) {
			t.Fatalf("%v from NaN = %#x, want a NaN", dt, n)
		}
	}
	// The documented edges, by hand.
	for _, c := range []struct {
		got, want uint8
		what      string
	}{
		{uint8(comm.Float8E4M3From(448)), 0x7e, "e4m3 448"},
		{uint8(comm.Float8E4M3From(1e6)), 0x7e, "e4m3 saturates"},
		{uint8(comm.Float8E4M3From(float32(math.Inf(-1)))), 0xfe, "e4m3 -Inf saturates"},
		{uint8(comm.Float8E4M3From(float32(math.NaN()))), 0x7f, "e4m3 NaN"},
		{uint8(comm.Float8E4M3From(1)), 0x38, "e4m3 1"},
		{uint8(comm.Float8E4M3From(0x1p-9)), 0x01, "e4m3 smallest subnormal"},
		{uint8(comm.Float8E4M3From(0x1p-10)), 0x00, "e4m3 half the smallest subnormal: tie to zero"},
		{uint8(comm.Float8E5M2From(57344)), 0x7b, "e5m2 57344"},
		{uint8(comm.Float8E5M2From(61440)), 0x7b, "e5m2 saturates"},
		{uint8(comm.Float8E5M2From(float32(math.Inf(1)))), 0x7b, "e5m2 Inf saturates"},
		{uint8(comm.Float8E5M2From(float32(math.NaN()))), 0x7e, "e5m2 NaN"},
		{uint8(comm.Float8E5M2From(1)), 0x3c, "e5m2 1"},
		{uint8(comm.Float8E5M2From(0x1p-16)), 0x01, "e5m2 smallest subnormal"},
		{uint8(comm.Float8E5M2From(float32(math.Copysign(0, -1)))), 0x80, "e5m2 -0"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %#x, want %#x", c.what, c.got, c.want)
		}
	}
}

// TestPreMul: PreMulSum's scaling is Prod by the scalar rounded to the
// dtype, element by element against the reference's Prod, for every float
// dtype, edge and random values, and scalars that round in the narrow
// types (0.1, 1e-3) or overflow them (1e5), and -0.
func TestPreMul(t *testing.T) {
	for _, dt := range comm.DTypes {
		if !dt.IsFloat() {
			continue
		}
		rng := rand.New(rand.NewPCG(37, uint64(dt)))
		vals := append([]uint64(nil), edgeValues(dt)...)
		for range 2000 {
			vals = append(vals, randomValue(dt, rng))
		}
		src := make([]byte, len(vals)*dt.Size())
		for i, v := range vals {
			putElem(dt, src, i, v)
		}
		for _, s := range []float64{0.5, -2, 3, 0.1, 1e-3, 1e5, math.Copysign(0, -1)} {
			b := refEncode(dt, s)
			dst := make([]byte, len(src))
			PreMul(dt, dst, src, s)
			for i, a := range vals {
				want, anyNaN := refReduce(dt, comm.Prod, a, b)
				got := elem(dt, dst, i)
				if anyNaN && !isNaNBits(dt, got) || !anyNaN && got != want {
					t.Fatalf("%v: %v × %v = %#x, want %#x", dt, describe(dt, a), s, got, want)
				}
			}
		}
	}
}
