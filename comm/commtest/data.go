package commtest

import (
	"encoding/binary"
	"math"
	"math/bits"

	"github.com/hiercomm/hiercomm/comm"
)

// domain is the set a case's input values come from. Each one makes the
// exact result independent of the order in which an implementation reduces.
type domain uint8

const (
	// domBits: arbitrary bits (the kinds that move data; NaN payloads included).
	domBits domain = iota
	// domSum: floats k/4 with |k| ≤ amp, small enough that every partial sum
	// of every subset of ranks is exact in the dtype; integers: arbitrary
	// bits (their sums wrap, and wrapping addition is associative).
	domSum
	// domProd: floats ±1/2, ±1, ±2 (±1 from rank maxScaledRanks on, so a
	// product stays inside binary16's normal range); integers: arbitrary,
	// mostly odd (so that products, which wrap, are rarely zero).
	domProd
	// domMinMax: arbitrary finite values (no −0, so that Min and Max of
	// equal-comparing values cannot differ in sign); integers: arbitrary bits.
	domMinMax
	// domRandom: floats ±(1 + m/2^mbits)·2^e, e in [−6, 0]: sums are not
	// exact and depend on the order of reduction.
	domRandom
)

// maxScaledRanks is how many ranks put a factor other than ±1 into a Prod:
// 2^±12 is inside binary16's normal range, so no partial product rounds.
// E4M3, whose values run from 2^-9 to 448, takes 2^±8 (maxScaledE4M3).
const (
	maxScaledRanks = 12
	maxScaledE4M3  = 8
)

// premulScalar is rank's factor in a PreMulSum case: 2, -1, 1/2 and 1 in
// turn, so ranks scale differently and every product is exact.
func premulScalar(rank int) float64 { return [...]float64{2, -1, 0.5, 1}[rank%4] }

// source generates the inputs of one case: element i of rank's input is a
// pure function of (case seed, rank, i), so every rank can compute every
// other rank's input.
type source struct {
	seed     uint64
	size     int
	e        elem
	dom      domain
	base     []uint64 // per rank: the hash every index of the rank starts from
	nanRank  int      // the rank with NaN at every third index, or -1
	amp      uint64   // domSum: |k| ≤ amp
	ampRanks int      // domSum: ranks from ampRanks on contribute 0
	scaled   int      // domProd: ranks from scaled on contribute ±1
	premul   bool     // PreMulSum: rank r's input is scaled by premulScalar(r)
}

func domainOf(kind comm.Kind, op comm.ReduceOp, v variant) domain {
	switch {
	case !kind.Reduces():
		return domBits
	case v == random:
		return domRandom
	case op == comm.Prod:
		return domProd
	case op == comm.Min || op == comm.Max:
		return domMinMax
	}
	return domSum
}

func newSource(tc *testCase, size int) *source {
	s := &source{seed: tc.seed, size: size, e: elemOf(tc.dt), dom: domainOf(tc.kind, tc.op, tc.v), base: make([]uint64, size), nanRank: -1,
		scaled: maxScaledRanks, premul: tc.op == comm.PreMulSum && tc.kind.Reduces()}
	if tc.dt == comm.F8E4M3 {
		s.scaled = maxScaledE4M3
	}
	for r := range s.base {
		s.base[r] = mix(tc.seed ^ mix(uint64(r)+0x51ed27))
	}
	if tc.v == withNaN && size > 0 {
		s.nanRank = int(tc.seed % uint64(size))
	}
	if s.e.float {
		// Every |partial sum| ≤ size·amp must be an integer multiple of 1/4
		// with at most mbits+1 significant bits.
		limit := uint64(1) << (s.e.mbits + 1)
		// PreMulSum's products are multiples of 1/8 up to twice as large:
		// in eighths, 4× the sum of the inputs.
		per := uint64(1)
		if s.premul {
			per = 4
		}
		s.amp, s.ampRanks = limit/(per*uint64(size)), size
		if s.amp == 0 {
			s.amp, s.ampRanks = 1, int(limit/per)
		}
	}
	return s
}

// mix is splitmix64's finalizer: a bijection that scrambles every bit.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// vals sets dst[i] to the value of element off+i of rank's input, for
// float dtypes in the reducing domains. Every value is exactly
// representable in the dtype.
func (s *source) vals(dst []float64, rank, off int) {
	base := s.base[rank] + uint64(off)*golden
	switch s.dom {
	case domSum:
		if rank >= s.ampRanks {
			clear(dst)
			break
		}
		span := 2*s.amp + 1
		for i := range dst {
			k, _ := bits.Mul64(mix(base+uint64(i)*golden), span) // uniform in [0, span)
			dst[i] = float64(int64(k)-int64(s.amp)) * 0.25
		}
	case domProd:
		for i := range dst {
			h := mix(base + uint64(i)*golden)
			e := int(h>>1%3) - 1
			if rank >= s.scaled {
				e = 0
			}
			f := math.Ldexp(1, e)
			if h&1 == 1 {
				f = -f
			}
			dst[i] = f
		}
	case domMinMax:
		expMask := (uint64(1)<<s.e.ebits - 1) << s.e.mbits
		for i := range dst {
			b := mix(base+uint64(i)*golden) & s.e.mask()
			if b&expMask == expMask { // Inf or NaN: halve the exponent instead
				b &^= 1 << (s.e.ebits + s.e.mbits - 1)
			}
			if b == 1<<(s.e.ebits+s.e.mbits) { // −0
				b = 0
			}
			dst[i] = s.e.toFloat(b)
		}
	case domRandom:
		scale := 1 / float64(uint64(1)<<s.e.mbits)
		for i := range dst {
			h := mix(base + uint64(i)*golden)
			f := math.Ldexp(1+float64(h>>12&(1<<s.e.mbits-1))*scale, -int(h>>4%7))
			if h&1 == 1 {
				f = -f
			}
			dst[i] = f
		}
	}
	if rank == s.nanRank {
		for i := (3 - off%3) % 3; i < len(dst); i += 3 {
			dst[i] = math.NaN()
		}
	}
}

// ints sets dst[i] to the bits of element off+i of rank's input, for the
// integer dtypes and for the kinds that move data (domBits, any dtype).
func (s *source) ints(dst []uint64, rank, off int) {
	base := s.base[rank] + uint64(off)*golden
	mask := s.e.mask()
	if s.e.boolean {
		mask = 1
	}
	if s.dom == domProd {
		for i := range dst {
			h := mix(base + uint64(i)*golden)
			if h>>60 != 0 {
				h |= 1
			}
			dst[i] = h & mask
		}
		return
	}
	for i := range dst {
		dst[i] = mix(base+uint64(i)*golden) & mask
	}
}

// golden spaces the hashes of consecutive indices.
const golden = 0x9e3779b97f4a7c15

// fill writes elements [off, off+n) of rank's input into b from index 0,
// as they lie in the send buffer.
func (s *source) fill(b []byte, rank, off, n int) {
	if s.dom == domBits {
		s.stream(b[:n*s.e.size], rank, off*s.e.size)
		if s.e.boolean { // a bool is 0 or 1, also where it only moves
			for i := range b[:n] {
				b[i] &= 1
			}
		}
		return
	}
	const chunk = 4096
	var fv [chunk]float64
	var uv [chunk]uint64
	for done := 0; done < n; done += chunk {
		m := min(chunk, n-done)
		if s.e.float && s.dom != domBits {
			s.vals(fv[:m], rank, off+done)
			s.e.fromFloats(uv[:m], fv[:m])
		} else {
			s.ints(uv[:m], rank, off+done)
		}
		s.e.putAll(b[done*s.e.size:], uv[:m])
	}
}

// stream fills b with bytes [at, at+len(b)) of rank's byte stream, eight
// bytes per hash: the input of the kinds that only move data.
func (s *source) stream(b []byte, rank, at int) {
	base := s.base[rank]
	for len(b) > 0 {
		w := at / 8
		var word [8]byte
		binary.LittleEndian.PutUint64(word[:], mix(base+uint64(w)*golden))
		k := copy(b, word[at%8:])
		b, at = b[k:], at+k
	}
}

// block returns elements [off, off+n) of rank's input, as they lie in the
// send buffer. Callers must not modify it (see memo). Every user of a rank's
// input asks for the same blocks (a rank's whole input when it is n
// elements; block j of n, or of vcount(rank, j, n), when it has one per rank),
// so the ranks of one process share them.
func (s *source) block(rank, off, n int) []byte {
	k := memoKey{seed: s.seed, size: uint64(s.size), what: 'i', rank: rank, off: off, n: n}
	return memo.get(k, func() []byte {
		b := make([]byte, n*s.e.size)
		s.fill(b, rank, off, n)
		return b
	})
}

// reduction returns the bits of the reduction by op over the inputs of ranks
// [lo, hi), at indices [off, off+n): the reference for AllReduce, Reduce,
// ReduceScatter, Scan and ExScan. Floats are reduced in float64, which is
// exact for the domains above, NaN propagating through every op; Avg divides
// the exact sum by div and rounds once. An empty range is the op's identity.
// Callers must not modify the result (see memo).
func (s *source) reduction(op comm.ReduceOp, lo, hi, off, n, div int) []byte {
	k := memoKey{seed: s.seed, size: uint64(s.size), what: 'r', op: uint8(op), lo: lo, hi: hi, off: off, n: n, rank: div}
	return memo.get(k, func() []byte { return s.reduce(op, lo, hi, off, n, div) })
}

func (s *source) reduce(op comm.ReduceOp, lo, hi, off, n, div int) []byte {
	out := make([]byte, n*s.e.size)
	es := s.e.size
	inputs := make([][]byte, 0, hi-lo)
	for q := lo; q < hi; q++ {
		inputs = append(inputs, s.block(q, off, n))
	}
	const chunk = 4096
	var res, iv [chunk]uint64
	var acc, fv [chunk]float64
	for done := 0; done < n; done += chunk {
		m := min(chunk, n-done)
		if s.e.float {
			id := floatIdentity(op)
			for i := range m {
				acc[i] = id
			}
			for qi, in := range inputs {
				v := fv[:m]
				s.e.decodeFloats(v, in[done*es:])
				switch op {
				case comm.PreMulSum:
					k := premulScalar(lo + qi)
					for i, x := range v {
						acc[i] += x * k // exact: see newSource
					}
				case comm.Prod:
					for i, x := range v {
						acc[i] *= x
					}
				case comm.Min:
					for i, x := range v {
						acc[i] = math.Min(acc[i], x) // NaN if either is
					}
				case comm.Max:
					for i, x := range v {
						acc[i] = math.Max(acc[i], x)
					}
				default: // Sum, Avg
					for i, x := range v {
						acc[i] += x
					}
				}
			}
			if op == comm.Avg {
				for i := range m {
					acc[i] /= float64(div)
				}
			}
			s.e.fromFloats(res[:m], acc[:m])
		} else {
			id := s.intIdentity(op)
			for i := range m {
				res[i] = id
			}
			for _, in := range inputs {
				v := iv[:m]
				s.e.getAll(v, in[done*es:])
				for i, x := range v {
					res[i] = s.combineInt(op, res[i], x)
				}
			}
		}
		s.e.putAll(out[done*es:], res[:m])
	}
	return out
}

func floatIdentity(op comm.ReduceOp) float64 {
	switch op {
	case comm.Prod:
		return 1
	case comm.Min:
		return math.Inf(1)
	case comm.Max:
		return math.Inf(-1)
	}
	return 0
}

func (s *source) intIdentity(op comm.ReduceOp) uint64 {
	top := uint64(1) << (s.e.width - 1)
	switch {
	case s.e.boolean && (op == comm.Prod || op == comm.Min || op == comm.BAnd):
		return 1 // true: the identity of AND
	case s.e.boolean:
		return 0
	case op == comm.BAnd:
		return s.e.mask()
	case op == comm.Prod:
		return 1
	case op == comm.Min && s.e.signed:
		return top - 1
	case op == comm.Min:
		return s.e.mask()
	case op == comm.Max && s.e.signed:
		return top
	}
	return 0
}

// combineInt works on the low width bits: wrapping Sum and Prod are the same
// for signed and unsigned two's complement; Min and Max are not.
func (s *source) combineInt(op comm.ReduceOp, a, b uint64) uint64 {
	if s.e.boolean { // logical, on 0 and 1
		switch op {
		case comm.Sum, comm.Max, comm.BOr:
			return a | b
		case comm.BXor:
			return a ^ b
		}
		return a & b // Prod, Min, BAnd
	}
	switch op {
	case comm.BAnd:
		return a & b
	case comm.BOr:
		return a | b
	case comm.BXor:
		return a ^ b
	case comm.Prod:
		return a * b & s.e.mask()
	case comm.Min:
		if s.e.less(b, a) {
			return b
		}
		return a
	case comm.Max:
		if s.e.less(a, b) {
			return b
		}
		return a
	}
	return (a + b) & s.e.mask()
}

// garbage fills b with bytes no correct result is likely to equal, so that
// an element a collective forgot to write is caught: 4 KiB of hash, repeated.
func garbage(b []byte, seed uint64) {
	head := b[:min(len(b), 4096)]
	for i := 0; i < len(head); i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], mix(seed+uint64(i)))
		copy(head[i:], w[:])
	}
	for k := len(head); k < len(b); k *= 2 {
		copy(b[k:], b[:k])
	}
}
