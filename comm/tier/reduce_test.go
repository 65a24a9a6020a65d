package tier

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// The kernels are checked element by element against a reference written
// from the definitions: exact arithmetic in big.Rat / big.Int, rounded once
// to the compute type (float32 for f16 and bf16, then rounded again to 16
// bits, as documented), the IEEE rules for Inf, NaN and signed zeros spelled
// out, and integer results wrapped modulo 2^bits.

// elem reads element i of b (little-endian) as its bits.
func elem(dt comm.DType, b []byte, i int) uint64 {
	var w [8]byte
	copy(w[:], b[i*dt.Size():(i+1)*dt.Size()])
	return binary.LittleEndian.Uint64(w[:])
}

func putElem(dt comm.DType, b []byte, i int, bits uint64) {
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], bits)
	copy(b[i*dt.Size():(i+1)*dt.Size()], w[:dt.Size()])
}

// refFloat is the exact value of the bits of a float element.
func refFloat(dt comm.DType, bits uint64) float64 {
	switch dt {
	case comm.F32:
		return float64(math.Float32frombits(uint32(bits)))
	case comm.F64:
		return math.Float64frombits(bits)
	case comm.F16:
		return refF16.decode(uint16(bits))
	case comm.F8E4M3, comm.F8E5M2:
		return fp8RefOf(dt).decode(uint8(bits))
	default:
		return refBF16.decode(uint16(bits))
	}
}

// refInt is the value of the bits of an integer element.
func refInt(dt comm.DType, bits uint64) *big.Int {
	switch dt {
	case comm.I8:
		return big.NewInt(int64(int8(bits)))
	case comm.I16:
		return big.NewInt(int64(int16(bits)))
	case comm.I32:
		return big.NewInt(int64(int32(bits)))
	case comm.I64:
		return big.NewInt(int64(bits))
	}
	return new(big.Int).SetUint64(bits)
}

// refEncode rounds a float64 that holds a value of the compute type (float32
// for the 16-bit types) to dt's bits.
func refEncode(dt comm.DType, x float64) uint64 {
	switch dt {
	case comm.F32:
		return uint64(math.Float32bits(float32(x))) // exact: x is a float32
	case comm.F64:
		return math.Float64bits(x)
	case comm.F16:
		return uint64(refF16.round(x))
	case comm.F8E4M3, comm.F8E5M2:
		return uint64(fp8RefOf(dt).round(x))
	default:
		return uint64(refBF16.round(x))
	}
}

// refReduce is a op b on dt's bits. anyNaN says that the result must be a
// NaN but IEEE leaves its payload open (Sum and Prod with a NaN operand, or
// an invalid operation).
func refReduce(dt comm.DType, op comm.ReduceOp, a, b uint64) (want uint64, anyNaN bool) {
	if op == comm.Avg || op == comm.PreMulSum {
		op = comm.Sum
	}
	switch {
	case op == comm.BAnd:
		return a & b, false
	case op == comm.BOr:
		return a | b, false
	case op == comm.BXor:
		return a ^ b, false
	case dt == comm.Bool: // logical, on 0 and 1
		if op == comm.Sum || op == comm.Max {
			return a | b, false
		}
		return a & b, false
	}
	if !dt.IsFloat() {
		x, y := refInt(dt, a), refInt(dt, b)
		var r *big.Int
		switch op {
		case comm.Sum:
			r = new(big.Int).Add(x, y)
		case comm.Prod:
			r = new(big.Int).Mul(x, y)
		case comm.Min:
			if y.Cmp(x) < 0 {
				return b, false
			}
			return a, false
		case comm.Max:
			if y.Cmp(x) > 0 {
				return b, false
			}
			return a, false
		}
		mod := new(big.Int).Lsh(big.NewInt(1), uint(8*dt.Size()))
		return r.Mod(r, mod).Uint64(), false // two's complement wrap
	}
	x, y := refFloat(dt, a), refFloat(dt, b)
	xNaN, yNaN := math.IsNaN(x), math.IsNaN(y)
	switch op {
	case comm.Min, comm.Max:
		switch {
		case xNaN:
			return a, false
		case yNaN:
			return b, false
		}
		yBelow := y < x || x == 0 && y == 0 && math.Signbit(y) && !math.Signbit(x)
		yAbove := y > x || x == 0 && y == 0 && !math.Signbit(y) && math.Signbit(x)
		if op == comm.Min && yBelow || op == comm.Max && yAbove {
			return b, false
		}
		return a, false
	}
	if xNaN || yNaN {
		return 0, true
	}
	xInf, yInf := math.IsInf(x, 0), math.IsInf(y, 0)
	negProd := math.Signbit(x) != math.Signbit(y)
	var r float64
	switch {
	case op == comm.Sum && xInf && yInf && math.Signbit(x) != math.Signbit(y):
		return 0, true // Inf - Inf
	case op == comm.Sum && xInf:
		r = x
	case op == comm.Sum && yInf:
		r = y
	case op == comm.Prod && (xInf && y == 0 || yInf && x == 0):
		return 0, true // Inf × 0
	case op == comm.Prod && (xInf || yInf):
		r = math.Inf(1)
		if negProd {
			r = math.Inf(-1)
		}
	default:
		rx, ry := new(big.Rat).SetFloat64(x), new(big.Rat).SetFloat64(y)
		exact := new(big.Rat)
		if op == comm.Sum {
			exact.Add(rx, ry)
		} else {
			exact.Mul(rx, ry)
		}
		if dt == comm.F64 {
			r, _ = exact.Float64()
		} else {
			r32, _ := exact.Float32()
			r = float64(r32)
		}
		if r == 0 { // exact zero or underflow: the sign rules of IEEE 754
			neg := exact.Sign() < 0
			if exact.Sign() == 0 {
				neg = op == comm.Sum && math.Signbit(x) && math.Signbit(y) || op == comm.Prod && negProd
			}
			r = 0
			if neg {
				r = math.Copysign(0, -1)
			}
		}
	}
	return refEncode(dt, r), false
}

func isNaNBits(dt comm.DType, bits uint64) bool {
	switch dt {
	case comm.F32:
		return bits&0x7fffffff > 0x7f800000
	case comm.F64:
		return bits&^(1<<63) > 0x7ff0000000000000
	case comm.F16:
		return bits&0x7fff > 0x7c00
	case comm.BF16:
		return bits&0x7fff > 0x7f80
	case comm.F8E4M3, comm.F8E5M2:
		return fp8RefOf(dt).isNaN(uint8(bits))
	}
	return false
}

// edgeValues are the bits of the values where kernels go wrong.
func edgeValues(dt comm.DType) []uint64 {
	switch dt {
	case comm.F32:
		return []uint64{0, 0x80000000, 1, 0x80000001, 0x007fffff, 0x00800000, 0x80800000, 0x3f800000, 0xbf800000,
			0x3f800001, 0x33800000, 0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001,
			0x40000000, 0x3f000000, 0x5f800000}
	case comm.F64:
		return []uint64{0, 1 << 63, 1, 1<<63 | 1, 0x000fffffffffffff, 0x0010000000000000, 0x3ff0000000000000,
			0xbff0000000000000, 0x3ff0000000000001, 0x3ca0000000000000, 0x7fefffffffffffff, 0xffefffffffffffff,
			0x7ff0000000000000, 0xfff0000000000000, 0x7ff8000000000000, 0xfff8000000000001, 0x7ff0000000000001,
			0x4000000000000000, 0x5ff0000000000000}
	case comm.F16:
		return []uint64{0, 0x8000, 1, 0x8001, 0x03ff, 0x0400, 0x8400, 0x3c00, 0xbc00, 0x3c01, 0x1400, 0x1000, 0x0c00,
			0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7c01, 0x4000, 0x3800, 0x5bff, 0x5c00}
	case comm.BF16:
		return []uint64{0, 0x8000, 1, 0x8001, 0x007f, 0x0080, 0x8080, 0x3f80, 0xbf80, 0x3f81, 0x3b80, 0x3b00,
			0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81, 0x4000, 0x3f00, 0x5f80, 0x1f80}
	case comm.F8E4M3:
		return []uint64{0, 0x80, 1, 0x81, 0x07, 0x08, 0x88, 0x38, 0xb8, 0x39, 0x7e, 0xfe, 0x7d, 0x7f, 0xff, 0x40, 0x30, 0x77}
	case comm.F8E5M2:
		return []uint64{0, 0x80, 1, 0x81, 0x03, 0x04, 0x84, 0x3c, 0xbc, 0x3d, 0x7b, 0xfb, 0x7c, 0xfc, 0x7e, 0xff, 0x7d, 0x40, 0x38}
	case comm.Bool:
		return []uint64{0, 1}
	case comm.I8, comm.U8:
		return []uint64{0, 1, 0x7f, 0x80, 0xff, 0x81, 2, 0x40}
	case comm.I16, comm.U16:
		return []uint64{0, 1, 0x7fff, 0x8000, 0xffff, 0x8001, 2, 0x100, 0xff}
	case comm.I32, comm.U32:
		return []uint64{0, 1, 0x7fffffff, 0x80000000, 0xffffffff, 0x80000001, 2, 0x10000, 0xffff}
	default:
		return []uint64{0, 1, 1<<63 - 1, 1 << 63, 1<<64 - 1, 1<<63 + 1, 2, 1 << 32, 1<<32 - 1}
	}
}

// randomValue is either random bits (every exponent, NaNs and Infs among
// them), an ordinary value of moderate magnitude (where rounding decides the
// last bit), or an edge value.
func randomValue(dt comm.DType, rng *rand.Rand) uint64 {
	if dt == comm.Bool {
		return uint64(rng.IntN(2))
	}
	switch rng.IntN(5) {
	case 0:
		return rng.Uint64() >> (64 - 8*dt.Size())
	case 1:
		e := edgeValues(dt)
		return e[rng.IntN(len(e))]
	}
	sign := uint64(rng.IntN(2))
	switch dt {
	case comm.F32:
		return sign<<31 | uint64(117+rng.IntN(20))<<23 | rng.Uint64()&0x7fffff
	case comm.F64:
		return sign<<63 | uint64(1013+rng.IntN(20))<<52 | rng.Uint64()&(1<<52-1)
	case comm.F16:
		return sign<<15 | uint64(10+rng.IntN(10))<<10 | rng.Uint64()&0x3ff
	case comm.BF16:
		return sign<<15 | uint64(117+rng.IntN(20))<<7 | rng.Uint64()&0x7f
	case comm.F8E4M3:
		return sign<<7 | uint64(3+rng.IntN(8))<<3 | rng.Uint64()&0x7
	case comm.F8E5M2:
		return sign<<7 | uint64(10+rng.IntN(10))<<2 | rng.Uint64()&0x3
	}
	v := uint64(rng.IntN(7)) - 3 // small integers, for Prod
	return v & (1<<(8*dt.Size()) - 1)
}

// checkKernel runs the kernel of dt and op on dst and src and compares every
// element with the reference.
func checkKernel(t *testing.T, dt comm.DType, op comm.ReduceOp, dst, src []byte) {
	t.Helper()
	kernel, err := ReduceFunc(dt, op)
	if err != nil {
		t.Fatalf("ReduceFunc(%v, %v): %v", dt, op, err)
	}
	orig := append([]byte(nil), dst...)
	srcCopy := append([]byte(nil), src...)
	kernel(dst, src)
	if string(src) != string(srcCopy) {
		t.Fatalf("%v %v: the kernel wrote to src", dt, op)
	}
	for i := range len(dst) / dt.Size() {
		a, b, got := elem(dt, orig, i), elem(dt, src, i), elem(dt, dst, i)
		want, anyNaN := refReduce(dt, op, a, b)
		if anyNaN {
			if !isNaNBits(dt, got) {
				t.Fatalf("%v %v [%d]: %#x op %#x = %#x, want a NaN", dt, op, i, a, b, got)
			}
			continue
		}
		if got != want {
			t.Fatalf("%v %v [%d]: %#x op %#x (%v op %v) = %#x, want %#x", dt, op, i, a, b,
				describe(dt, a), describe(dt, b), got, want)
		}
	}
}

func describe(dt comm.DType, bits uint64) string {
	if dt.IsFloat() {
		return fmt.Sprint(refFloat(dt, bits))
	}
	return refInt(dt, bits).String()
}

func TestReduceEveryDTypeAndOp(t *testing.T) {
	for _, dt := range comm.DTypes {
		for _, op := range comm.ReduceOps {
			if comm.CanReduce(dt, op) != nil {
				continue
			}
			t.Run(dt.String()+"/"+op.String(), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(dt), uint64(op)))
				for _, n := range []int{0, 1, 7, 1000} {
					dst, src := make([]byte, n*dt.Size()), make([]byte, n*dt.Size())
					for i := range n {
						putElem(dt, dst, i, randomValue(dt, rng))
						putElem(dt, src, i, randomValue(dt, rng))
					}
					checkKernel(t, dt, op, dst, src)
				}
			})
		}
	}
}

// TestReduceEdgePairs: every pair of edge values, both ways round.
func TestReduceEdgePairs(t *testing.T) {
	for _, dt := range comm.DTypes {
		edges := edgeValues(dt)
		dst, src := make([]byte, len(edges)*len(edges)*dt.Size()), make([]byte, len(edges)*len(edges)*dt.Size())
		for i, a := range edges {
			for j, b := range edges {
				putElem(dt, dst, i*len(edges)+j, a)
				putElem(dt, src, i*len(edges)+j, b)
			}
		}
		for _, op := range comm.ReduceOps {
			if comm.CanReduce(dt, op) == nil {
				checkKernel(t, dt, op, append([]byte(nil), dst...), src)
			}
		}
	}
}

// TestReduceHalfRandomPairs runs many more random operands through the f16
// and bf16 Sum and Prod kernels, whose rounding is done by hand.
func TestReduceHalfRandomPairs(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for _, dt := range []comm.DType{comm.F16, comm.BF16} {
		rng := rand.New(rand.NewPCG(3, uint64(dt)))
		dst, src := make([]byte, 2*n), make([]byte, 2*n)
		for i := range n {
			putElem(dt, dst, i, uint64(rng.Uint32()&0xffff))
			putElem(dt, src, i, randomValue(dt, rng))
		}
		for _, op := range []comm.ReduceOp{comm.Sum, comm.Prod} {
			checkKernel(t, dt, op, append([]byte(nil), dst...), src)
		}
	}
}

// TestReduceRounding pins down by hand a few results the reference could get
// wrong the same way as the kernels.
func TestReduceRounding(t *testing.T) {
	f16 := func(x float64) uint64 { return uint64(refF16.round(x)) }
	bf16 := func(x float64) uint64 { return uint64(refBF16.round(x)) }
	cases := []struct {
		dt         comm.DType
		op         comm.ReduceOp
		a, b, want uint64
	}{
		{comm.F16, comm.Sum, 0x3c00, f16(0x1p-11), 0x3c00},                               // 1 + half ulp: tie, to even
		{comm.F16, comm.Sum, 0x3c01, f16(0x1p-11), 0x3c02},                               // odd + half ulp: tie, up to even
		{comm.F16, comm.Sum, 0x7bff, f16(16), 0x7c00},                                    // 65504 + 16 = 65520: overflow
		{comm.F16, comm.Sum, 0x7bff, f16(8), 0x7bff},                                     // 65512 rounds back
		{comm.F16, comm.Sum, 0x0001, 0x8001, 0x0000},                                     // x + -x = +0
		{comm.F16, comm.Sum, 0x8000, 0x8000, 0x8000},                                     // -0 + -0 = -0
		{comm.F16, comm.Prod, 0x0001, 0x3800, 0x0000},                                    // 2^-24 × 0.5 = 2^-25: tie to zero
		{comm.F16, comm.Prod, 0x8001, 0x3800, 0x8000},                                    // … keeping the sign
		{comm.F16, comm.Prod, 0x0003, 0x3800, 0x0002},                                    // 1.5 units: tie, to even 2
		{comm.BF16, comm.Sum, 0x3f80, bf16(0x1p-8), 0x3f80},                              // 1 + half ulp: tie, to even
		{comm.BF16, comm.Sum, 0x3f81, bf16(0x1p-8), 0x3f82},                              // odd + half ulp: up to even
		{comm.BF16, comm.Sum, 0x7f7f, 0x7f7f, 0x7f80},                                    // overflow
		{comm.F16, comm.Min, 0x0000, 0x8000, 0x8000},                                     // min(+0, -0) = -0
		{comm.F16, comm.Min, 0x8000, 0x0000, 0x8000},                                     // either order
		{comm.F16, comm.Max, 0x8000, 0x0000, 0x0000},                                     // max(-0, +0) = +0
		{comm.F16, comm.Max, 0x7e01, 0x7e02, 0x7e01},                                     // two NaNs: dst's
		{comm.F16, comm.Min, 0x3c00, 0xfe03, 0xfe03},                                     // a NaN in src wins, bits kept
		{comm.F32, comm.Max, 0x7f800001, 0x3f800000, 0x7f800001},                         // a signaling NaN in dst, bits kept
		{comm.F64, comm.Min, 0x3ff0000000000000, 0xfff0000000000000, 0xfff0000000000000}, // -Inf
		{comm.I8, comm.Sum, 0x7f, 0x01, 0x80},                                            // 127 + 1 wraps to -128
		{comm.U8, comm.Sum, 0xff, 0x02, 0x01},                                            // 255 + 2 wraps to 1
		{comm.I32, comm.Prod, 0x10000, 0x10000, 0},                                       // 2^32 wraps to 0
		{comm.I64, comm.Min, 1 << 63, 0, 1 << 63},                                        // math.MinInt64
		{comm.U64, comm.Max, 1 << 63, 1, 1 << 63},                                        // unsigned compare
	}
	for _, c := range cases {
		dst, src := make([]byte, c.dt.Size()), make([]byte, c.dt.Size())
		putElem(c.dt, dst, 0, c.a)
		putElem(c.dt, src, 0, c.b)
		kernel, err := ReduceFunc(c.dt, c.op)
		if err != nil {
			t.Fatal(err)
		}
		kernel(dst, src)
		if got := elem(c.dt, dst, 0); got != c.want {
			t.Errorf("%v %v: %#x op %#x = %#x, want %#x", c.dt, c.op, c.a, c.b, got, c.want)
		}
	}
}

// TestReduceInPlace: dst and src may be the same memory.
func TestReduceInPlace(t *testing.T) {
	x := []float32{1, -2, 3.5, 0}
	b := comm.Host(x).Bytes()
	kernel, _ := ReduceFunc(comm.F32, comm.Sum)
	kernel(b, b)
	if want := []float32{2, -4, 7, 0}; fmt.Sprint(x) != fmt.Sprint(want) {
		t.Fatalf("in-place sum gave %v, want %v", x, want)
	}
}

// TestReduceLongUnrolled runs lengths around the unrolling and word sizes of
// the loops, with rank-distinct-like data, through every Sum kernel.
func TestReduceLongUnrolled(t *testing.T) {
	for _, dt := range comm.DTypes {
		rng := rand.New(rand.NewPCG(5, uint64(dt)))
		for n := range 20 {
			dst, src := make([]byte, n*dt.Size()), make([]byte, n*dt.Size())
			for i := range n {
				putElem(dt, dst, i, randomValue(dt, rng))
				putElem(dt, src, i, randomValue(dt, rng))
			}
			checkKernel(t, dt, comm.Sum, dst, src)
			checkKernel(t, dt, comm.Prod, dst, src)
		}
	}
}

// TestReduceOffsets: buffers need not start on an 8-byte boundary (a
// Buffer.Slice of a byte buffer does not); the i8/u8 Sum, which works on
// words, takes every combination of dst and src offsets, and the other
// kernels element-aligned offsets.
func TestReduceOffsets(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 29))
	for _, dt := range comm.DTypes {
		es := dt.Size()
		for od := 0; od < 8; od += es {
			for os := 0; os < 8; os += es {
				for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 33, 1000} {
					dbuf, sbuf := alignedBytes(8+n*es), alignedBytes(8+n*es)
					dst, src := dbuf[od:od+n*es], sbuf[os:os+n*es]
					for i := range n {
						putElem(dt, dst, i, randomValue(dt, rng))
						putElem(dt, src, i, randomValue(dt, rng))
					}
					checkKernel(t, dt, comm.Sum, dst, src)
				}
			}
		}
	}
}

func TestReduceFuncRefuses(t *testing.T) {
	cases := []struct {
		dt   comm.DType
		op   comm.ReduceOp
		want string
	}{
		{comm.I32, comm.Avg, "avg is not defined on integer dtype i32"},
		{comm.U8, comm.Avg, "avg is not defined"},
		{0, comm.Sum, "invalid dtype"},
		{comm.DType(comm.NumDTypes), comm.Sum, "invalid dtype"},
		{comm.F32, 0, "invalid reduce op"},
		{comm.F32, comm.ReduceOp(comm.NumReduceOps), "invalid reduce op"},
	}
	for _, c := range cases {
		k, err := ReduceFunc(c.dt, c.op)
		if err == nil || k != nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReduceFunc(%v, %v) = %v, %v; want nil and an error containing %q", c.dt, c.op, k != nil, err, c.want)
		}
	}
}

// TestReduceAvgIsSum: Avg reduces like Sum; the division comes at the end.
func TestReduceAvgIsSum(t *testing.T) {
	for _, dt := range []comm.DType{comm.F32, comm.F64, comm.F16, comm.BF16} {
		rng := rand.New(rand.NewPCG(9, uint64(dt)))
		dst, src := make([]byte, 64*dt.Size()), make([]byte, 64*dt.Size())
		for i := range 64 {
			putElem(dt, dst, i, randomValue(dt, rng))
			putElem(dt, src, i, randomValue(dt, rng))
		}
		sum, _ := ReduceFunc(dt, comm.Sum)
		avg, _ := ReduceFunc(dt, comm.Avg)
		d1, d2 := append([]byte(nil), dst...), append([]byte(nil), dst...)
		sum(d1, src)
		avg(d2, src)
		for i := range 64 {
			if a, b := elem(dt, d1, i), elem(dt, d2, i); a != b && !(isNaNBits(dt, a) && isNaNBits(dt, b)) {
				t.Fatalf("%v: avg step %#x differs from sum step %#x", dt, b, a)
			}
		}
	}
}

func TestReduceKernelPanicsOnBadLengths(t *testing.T) {
	for _, c := range []struct {
		dt       comm.DType
		dst, src int
	}{{comm.F32, 8, 4}, {comm.F32, 4, 8}, {comm.F32, 6, 6}, {comm.F64, 12, 12}, {comm.F16, 3, 3}, {comm.I8, 2, 3}} {
		kernel, _ := ReduceFunc(c.dt, comm.Sum)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%v kernel on %d and %d bytes did not panic", c.dt, c.dst, c.src)
				}
			}()
			kernel(make([]byte, c.dst), make([]byte, c.src))
		}()
	}
}

// refAvg is x/n rounded once to dt.
func refAvg(dt comm.DType, bits uint64, n int) (want uint64, anyNaN bool) {
	x := refFloat(dt, bits)
	switch {
	case math.IsNaN(x):
		return 0, true
	case n == 1: // nothing to divide: FinishAvg leaves the bits
		return bits, false
	case math.IsInf(x, 0) && (dt == comm.F8E4M3 || dt == comm.F8E5M2):
		return uint64(fp8RefOf(dt).round(x)), false // saturates
	case math.IsInf(x, 0) || x == 0:
		return bits, false
	}
	if dt == comm.F16 {
		return uint64(refF16.roundQuo(x, n)), false
	}
	if dt == comm.BF16 {
		return uint64(refBF16.roundQuo(x, n)), false
	}
	q := new(big.Rat).SetFloat64(x)
	q.Quo(q, big.NewRat(int64(n), 1))
	if dt == comm.F8E4M3 || dt == comm.F8E5M2 {
		// Rounding to float64 first is harmless: 53 bits are more than
		// 2×4+2 (double rounding of a quotient is then exact).
		r, _ := q.Float64()
		return uint64(fp8RefOf(dt).round(math.Copysign(r, x))), false
	}
	var r float64
	switch dt {
	case comm.F32:
		r32, _ := q.Float32()
		return uint64(math.Float32bits(r32)) | bits&0x80000000, false // an underflow to zero keeps the sign
	}
	r, _ = q.Float64()
	return math.Float64bits(r) | bits&(1<<63), false
}

func checkAvg(t *testing.T, dt comm.DType, values []uint64, n int) {
	t.Helper()
	buf := make([]byte, len(values)*dt.Size())
	for i, v := range values {
		putElem(dt, buf, i, v)
	}
	FinishAvg(dt, buf, n)
	for i, v := range values {
		got := elem(dt, buf, i)
		want, anyNaN := refAvg(dt, v, n)
		if anyNaN && !isNaNBits(dt, got) || !anyNaN && got != want {
			t.Fatalf("%v: %v / %d gave %#x, want %#x", dt, describe(dt, v), n, got, want)
		}
	}
}

// TestFinishAvg: every f16 and bf16 value divided by a few rank counts, and
// random f32 and f64 values, against exact division rounded once.
func TestFinishAvg(t *testing.T) {
	all := make([]uint64, 1<<16)
	for i := range all {
		all[i] = uint64(i)
	}
	ns := []int{3, 7}
	for _, dt := range []comm.DType{comm.F8E4M3, comm.F8E5M2} {
		for _, n := range []int{1, 2, 3, 5, 7, 12, 1000} {
			checkAvg(t, dt, all[:256], n)
		}
	}
	for _, dt := range []comm.DType{comm.F16, comm.BF16} {
		for _, n := range ns {
			checkAvg(t, dt, all, n)
		}
		rng := rand.New(rand.NewPCG(13, uint64(dt)))
		for _, n := range []int{1, 2, 5, 6, 8, 12, 1000} {
			some := make([]uint64, 2000)
			for i := range some {
				some[i] = all[rng.IntN(len(all))]
			}
			checkAvg(t, dt, some, n)
		}
	}
	for _, dt := range []comm.DType{comm.F32, comm.F64} {
		rng := rand.New(rand.NewPCG(17, uint64(dt)))
		values := append([]uint64(nil), edgeValues(dt)...)
		for range 5000 {
			values = append(values, randomValue(dt, rng))
		}
		for _, n := range []int{1, 2, 3, 5, 7, 8, 1000} {
			checkAvg(t, dt, values, n)
		}
	}
}

func TestFinishAvgPanics(t *testing.T) {
	for _, c := range []struct {
		dt comm.DType
		n  int
		b  int
	}{{comm.I32, 2, 8}, {comm.U8, 2, 1}, {comm.F32, 0, 8}, {comm.F32, -1, 8}, {comm.F64, 2, 4}, {0, 2, 4}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("FinishAvg(%v, %d bytes, %d) did not panic", c.dt, c.b, c.n)
				}
			}()
			FinishAvg(c.dt, make([]byte, c.b), c.n)
		}()
	}
}

// TestFillIdentity: the identity x of op satisfies x op y = y for every y
// (any NaN for a NaN y under Sum and Prod, which quiet it; and +0 for y = -0
// under float Sum, since the documented identity is +0, not IEEE's -0).
func TestFillIdentity(t *testing.T) {
	for _, dt := range comm.DTypes {
		for _, op := range comm.ReduceOps {
			if comm.CanReduce(dt, op) != nil {
				continue
			}
			for _, n := range []int{0, 1, 7, 1000} {
				buf := make([]byte, n*dt.Size())
				for i := range buf {
					buf[i] = 0xa5 // not an identity of anything
				}
				FillIdentity(dt, op, buf)
				for i := 1; i < n; i++ {
					if elem(dt, buf, i) != elem(dt, buf, 0) {
						t.Fatalf("%v %v: element %d is %#x, element 0 is %#x", dt, op, i, elem(dt, buf, i), elem(dt, buf, 0))
					}
				}
			}
			ys := append([]uint64(nil), edgeValues(dt)...)
			rng := rand.New(rand.NewPCG(19, uint64(dt)))
			for range 500 {
				ys = append(ys, randomValue(dt, rng))
			}
			id, src := make([]byte, len(ys)*dt.Size()), make([]byte, len(ys)*dt.Size())
			FillIdentity(dt, op, id)
			for i, y := range ys {
				putElem(dt, src, i, y)
			}
			kernel, _ := ReduceFunc(dt, op)
			kernel(id, src)
			for i, y := range ys {
				got := elem(dt, id, i)
				sum := op == comm.Sum || op == comm.Avg || op == comm.PreMulSum
				if dt.IsFloat() && sum && y == uint64(1)<<(8*dt.Size()-1) { // -0
					y = 0
				}
				if dt == comm.F8E5M2 && (sum || op == comm.Prod) && y&0x7f == 0x7c { // Inf saturates
					y = y&0x80 | 0x7b
				}
				if got != y && !(isNaNBits(dt, y) && isNaNBits(dt, got) && (sum || op == comm.Prod)) {
					t.Fatalf("%v %v: identity op %#x = %#x, want %#x", dt, op, y, got, y)
				}
			}
		}
	}
	// The documented values.
	for _, c := range []struct {
		dt   comm.DType
		op   comm.ReduceOp
		want uint64
	}{
		{comm.F32, comm.Sum, 0}, {comm.F64, comm.Avg, 0}, {comm.F16, comm.Prod, 0x3c00}, {comm.BF16, comm.Min, 0x7f80}, {comm.F16, comm.Max, 0xfc00},
		{comm.I8, comm.Min, 0x7f}, {comm.I8, comm.Max, 0x80}, {comm.U32, comm.Min, 0xffffffff}, {comm.U32, comm.Max, 0}, {comm.I64, comm.Prod, 1}, {comm.U64, comm.Sum, 0},
		{comm.I16, comm.BAnd, 0xffff}, {comm.U16, comm.Min, 0xffff}, {comm.I16, comm.Max, 0x8000}, {comm.U64, comm.BXor, 0},
		{comm.Bool, comm.BAnd, 1}, {comm.Bool, comm.Prod, 1}, {comm.Bool, comm.Sum, 0}, {comm.Bool, comm.Min, 1},
		{comm.F8E4M3, comm.Min, 0x7e}, {comm.F8E4M3, comm.Prod, 0x38}, {comm.F8E5M2, comm.Max, 0xfc}, {comm.F8E5M2, comm.PreMulSum, 0},
	} {
		buf := make([]byte, c.dt.Size())
		FillIdentity(c.dt, c.op, buf)
		if got := elem(c.dt, buf, 0); got != c.want {
			t.Errorf("FillIdentity(%v, %v) = %#x, want %#x", c.dt, c.op, got, c.want)
		}
	}
}

func TestFillIdentityPanics(t *testing.T) {
	for _, c := range []struct {
		dt comm.DType
		op comm.ReduceOp
		b  int
	}{{0, comm.Sum, 4}, {comm.F32, 0, 4}, {comm.F32, comm.Sum, 3}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("FillIdentity(%v, %v, %d bytes) did not panic", c.dt, c.op, c.b)
				}
			}()
			FillIdentity(c.dt, c.op, make([]byte, c.b))
		}()
	}
}

// TestVectorKernelsMatchScalar: the kernels ReduceFunc returns (vector ones
// where the machine has them, reduce_amd64.go) give the scalar kernels'
// bits for every dtype and op, at lengths around the vector and unrolling
// widths and at every element-aligned misalignment of dst and src, with NaNs
// of every kind common enough that two meet. The one choice IEEE leaves
// open, the NaN of a float Sum or Prod of two NaNs, must be dst's, quieted,
// on every element; the scalar loops follow no rule there (the Go compiler
// orders the operands of an add differently between the elements of an
// unrolled group, and between builds: the race detector's is another), so
// their result is only required to be a NaN. (f16 and bf16 have no vector
// kernels: their results must match exactly.)
func TestVectorKernelsMatchScalar(t *testing.T) {
	inUse := reflect.ValueOf(kernels[comm.F32][comm.Sum]).Pointer() != reflect.ValueOf(scalarKernels[comm.F32][comm.Sum]).Pointer()
	t.Logf("vector kernels in use: %v", inUse)
	quiet := func(dt comm.DType, bits uint64) uint64 {
		if dt == comm.F32 {
			return bits | 1<<22
		}
		return bits | 1<<51
	}
	nan := func(dt comm.DType, rng *rand.Rand) uint64 {
		switch dt {
		case comm.F32:
			return uint64(rng.IntN(2))<<31 | 0x7f800000 | (1 + rng.Uint64()%(1<<23-1))
		case comm.F64:
			return uint64(rng.IntN(2))<<63 | 0x7ff0000000000000 | (1 + rng.Uint64()%(1<<52-1))
		}
		return randomValue(dt, rng)
	}
	lengths := []int{0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 1000, 4099}
	for _, dt := range comm.DTypes {
		es := dt.Size()
		for _, op := range []comm.ReduceOp{comm.Sum, comm.Prod, comm.Min, comm.Max} {
			if comm.CanReduce(dt, op) != nil {
				continue
			}
			vector, scalar := kernels[dt][op], scalarKernels[dt][op]
			rng := rand.New(rand.NewPCG(31, uint64(dt)<<8|uint64(op)))
			for _, n := range lengths {
				for off := 0; off < 32; off += max(es, 4) {
					soff := off / 2 / es * es // a different misalignment for src
					dst := alignedBytes(off + n*es)[off:]
					src := alignedBytes(soff + n*es)[soff:]
					for i := range n {
						for _, b := range [][]byte{dst, src} {
							v := randomValue(dt, rng)
							if rng.IntN(4) == 0 {
								v = nan(dt, rng)
							}
							putElem(dt, b, i, v)
						}
					}
					want, got := append([]byte(nil), dst...), append([]byte(nil), dst...)
					scalar(want, src)
					vector(got, src)
					for i := range n {
						a, b := elem(dt, dst, i), elem(dt, src, i)
						w, g := elem(dt, want, i), elem(dt, got, i)
						if (dt == comm.F32 || dt == comm.F64) && (op == comm.Sum || op == comm.Prod) && isNaNBits(dt, a) && isNaNBits(dt, b) {
							if !isNaNBits(dt, w) {
								t.Fatalf("%v %v n=%d [%d]: scalar %#x op %#x = %#x, want a NaN", dt, op, n, i, a, b, w)
							}
							if !inUse {
								w = g // the scalar kernel itself: any NaN, checked next
								if !isNaNBits(dt, g) {
									t.Fatalf("%v %v n=%d [%d]: %#x op %#x = %#x, want a NaN", dt, op, n, i, a, b, g)
								}
							} else {
								w = quiet(dt, a)
							}
						}
						if g != w {
							t.Fatalf("%v %v n=%d offset %d [%d]: %#x op %#x = %#x, the scalar kernel gives %#x", dt, op, n, off, i, a, b, g, w)
						}
					}
				}
			}
		}
	}
}

// alignedBytes returns n zero bytes aligned for every dtype (8 bytes), as the
// reduction kernels expect.
func alignedBytes(n int) []byte { return comm.Host(make([]uint64, (n+7)/8)).Bytes()[:n] }
