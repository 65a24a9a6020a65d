package commtest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// The suite's own binary16 and bfloat16 conversions against known values.
func TestNarrowKnownValues(t *testing.T) {
	for _, tt := range []struct {
		dt   comm.DType
		f    float64
		bits uint64
	}{
		{comm.F16, 1, 0x3c00},
		{comm.F16, -2, 0xc000},
		{comm.F16, 65504, 0x7bff},
		{comm.F16, 65519.99, 0x7bff},
		{comm.F16, 65520, 0x7c00}, // a tie, to the even neighbour: +Inf
		{comm.F16, math.Ldexp(1, -24), 0x0001},
		{comm.F16, math.Ldexp(1, -25), 0x0000},                      // a tie, to even: 0
		{comm.F16, math.Ldexp(1.5, -25), 0x0001},                    // above the tie
		{comm.F16, math.Ldexp(1, -14), 0x0400},                      // smallest normal
		{comm.F16, math.Ldexp(1, -14) - math.Ldexp(1, -25), 0x0400}, // rounds up into it
		{comm.F16, 0.1, 0x2e66},
		{comm.F16, 1 + math.Ldexp(1, -11), 0x3c00}, // tie, to even
		{comm.F16, 1 + math.Ldexp(3, -11), 0x3c02}, // tie, to even (up)
		{comm.F16, math.Copysign(0, -1), 0x8000},
		{comm.F16, math.Inf(-1), 0xfc00},
		{comm.BF16, 1, 0x3f80},
		{comm.BF16, 1 + math.Ldexp(1, -8), 0x3f80}, // tie, to even
		{comm.BF16, 1 + math.Ldexp(3, -8), 0x3f82},
		{comm.BF16, -3.140625, 0xc049},
		{comm.BF16, math.MaxFloat32, 0x7f80}, // rounds up to +Inf
		{comm.BF16, math.Ldexp(1, -133), 0x0001},
		{comm.BF16, math.Ldexp(1, -126), 0x0080},
	} {
		e := elemOf(tt.dt)
		if got := e.fromFloat(tt.f); got != tt.bits {
			t.Errorf("%v from %v = %#04x, want %#04x", tt.dt, tt.f, got, tt.bits)
		}
		if got := e.fromFloats1(tt.f); got != tt.bits {
			t.Errorf("%v fromFloats %v = %#04x, want %#04x", tt.dt, tt.f, got, tt.bits)
		}
		if !math.IsInf(tt.f, 0) && math.Abs(tt.f) <= 65504 && e.fromFloat(e.toFloat(tt.bits)) != tt.bits {
			t.Errorf("%v: %#04x does not round-trip", tt.dt, tt.bits)
		}
	}
	if e := elemOf(comm.F16); !e.isNaN(e.fromFloat(math.NaN())) || !math.IsNaN(e.toFloat(0x7e00)) {
		t.Error("f16 NaN")
	}
	if e := elemOf(comm.BF16); !e.isNaN(e.fromFloat(math.NaN())) || !math.IsNaN(e.toFloat(0x7fc0)) {
		t.Error("bf16 NaN")
	}
}

func (e elem) fromFloats1(f float64) uint64 {
	var out [1]uint64
	e.fromFloats(out[:], []float64{f})
	return out[0]
}

// The suite's conversions and comm's (written apart) must agree: every
// 16-bit pattern widened, and many values narrowed (random, near ties, and
// across the subnormal and overflow edges). A disagreement is a bug in one
// of the two.
func TestConversionsAgreeWithComm(t *testing.T) {
	f16, bf16 := elemOf(comm.F16), elemOf(comm.BF16)
	for b := range 1 << 16 {
		h, g := comm.Float16(b), comm.BFloat16(b)
		if w, c := f16.toFloat(uint64(b)), float64(h.Float32()); w != c && !(math.IsNaN(w) && math.IsNaN(c)) {
			t.Fatalf("f16 %#04x: commtest %v, comm %v", b, w, c)
		}
		if w, c := bf16.toFloat(uint64(b)), float64(g.Float32()); w != c && !(math.IsNaN(w) && math.IsNaN(c)) {
			t.Fatalf("bf16 %#04x: commtest %v, comm %v", b, w, c)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2_000_000 {
		var f float64
		switch i % 4 {
		case 0: // anywhere in the 16-bit range
			f = math.Ldexp(rng.Float64()+0.5, rng.IntN(70)-40)
		case 1: // a tie or next to one for f16
			b := rng.Uint64N(0x7c00)
			f = (f16.toFloat(b) + f16.toFloat(b+1)) / 2
			f = math.Nextafter(f, f+float64(rng.IntN(3)-1))
		case 2: // the same for bf16
			b := rng.Uint64N(0x7f80)
			f = (bf16.toFloat(b) + bf16.toFloat(b+1)) / 2
			f = math.Nextafter(f, f+float64(rng.IntN(3)-1))
		default: // anywhere in float32's range
			f = math.Ldexp(rng.Float64()+0.5, rng.IntN(280)-140)
		}
		if rng.IntN(2) == 0 {
			f = -f
		}
		if w, c := f16.fromFloat(f), uint64(comm.Float16FromFloat64(f)); w != c {
			t.Fatalf("f16 from %v (%#x): commtest %#04x, comm %#04x", f, math.Float64bits(f), w, c)
		}
		if w, c := f16.fromFloats1(f), uint64(comm.Float16FromFloat64(f)); w != c {
			t.Fatalf("f16 (batch) from %v (%#x): commtest %#04x, comm %#04x", f, math.Float64bits(f), w, c)
		}
		if w, c := bf16.fromFloats1(f), uint64(comm.BFloat16FromFloat64(f)); w != c {
			t.Fatalf("bf16 (batch) from %v (%#x): commtest %#04x, comm %#04x", f, math.Float64bits(f), w, c)
		}
		if w, c := bf16.fromFloat(f), uint64(comm.BFloat16FromFloat64(f)); w != c {
			t.Fatalf("bf16 from %v (%#x): commtest %#04x, comm %#04x", f, math.Float64bits(f), w, c)
		}
	}
}
