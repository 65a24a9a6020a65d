package bench

import (
	"encoding/binary"
	"math"

	"github.com/hiercomm/hiercomm/comm"
)

// The check data. Element i of rank r's input is a small integer from a
// hash of (r, i), so neighbouring ranks and blocks differ (a result that
// lands in the wrong block or comes from the wrong rank is caught) and no
// shift of whole blocks maps the data onto itself. The values are chosen per
// reduction so that the exact result does not depend on the order of
// reduction, and the reference computes it exactly in int64:
//
//   - sum and avg: 0 ≤ v < span with span·P inside the dtype's exact
//     integers (256 for bf16, 2048 for f16, 2^24 otherwise), so every
//     partial sum is exact; integer sums wrap, as the reference's do.
//   - prod: ±1, so every partial product is exact (and wraps consistently
//     on integers: −1 is all ones).
//   - min, max and the operations that only move data: 0 ≤ v < span.

// gen generates the check data of one operation.
type gen struct {
	dt   comm.DType
	op   comm.ReduceOp // 0 when the operation does not reduce
	span uint32
	p    int
}

func newGen(dt comm.DType, op comm.ReduceOp, p int) gen {
	exact := uint32(1 << 24)
	switch dt {
	case comm.BF16, comm.U8:
		exact = 256
	case comm.F16:
		exact = 2048
	case comm.I8:
		exact = 128
	case comm.I16:
		exact = 1 << 15
	case comm.U16:
		exact = 1 << 16
	case comm.Bool:
		exact = 2
	case comm.F8E4M3:
		exact = 16
	case comm.F8E5M2:
		exact = 8
	}
	g := gen{dt: dt, op: op, span: exact, p: p}
	if (op == comm.Sum || op == comm.Avg || op == comm.PreMulSum) && dt.IsFloat() {
		g.span = max(1, exact/uint32(p))
	}
	return g
}

// hash scrambles (r, i) into 32 bits.
func hash(r, i int) uint32 {
	h := uint32(i)*0x9e3779b1 ^ (uint32(r)+1)*0x85ebca77
	h ^= h >> 15
	h *= 0x2c1b3c6d
	h ^= h >> 12
	h *= 0x297a2d39
	h ^= h >> 15
	return h
}

// value is element i of rank r's input.
func (g gen) value(r, i int) int64 {
	h := hash(r, i)
	if g.op == comm.Prod && g.dt != comm.Bool {
		return 1 - 2*int64(h>>31)
	}
	return int64(h % g.span)
}

// reduced is the exact reduction over every rank of element i, as bits of
// the dtype.
func (g gen) reduced(i int) uint64 {
	acc := g.value(0, i)
	for q := 1; q < g.p; q++ {
		v := g.value(q, i)
		switch g.op {
		case comm.Sum, comm.Avg, comm.PreMulSum: // PreMulSum's factor is 1
			acc += v
		case comm.Prod:
			acc *= v
		case comm.BAnd:
			acc &= v
		case comm.BOr:
			acc |= v
		case comm.BXor:
			acc ^= v
		case comm.Min:
			acc = min(acc, v)
		case comm.Max:
			acc = max(acc, v)
		}
	}
	switch {
	case g.op == comm.Avg:
		return floatBits(g.dt, float64(acc)/float64(g.p))
	case g.dt == comm.Bool && (g.op == comm.Sum || g.op == comm.Prod): // OR and AND of 0 and 1
		return uint64(min(acc, 1))
	}
	return bitsOf(g.dt, acc)
}

// bitsOf is v in dt: exact for the values gen makes; integers wrap.
func bitsOf(dt comm.DType, v int64) uint64 {
	if dt.IsFloat() {
		return floatBits(dt, float64(v))
	}
	return uint64(v)
}

// floatBits rounds f to dt once, to nearest even (float32(f) rounds a
// float64 quotient a second time, which is exact for a quotient of
// integers: binary64 has more than twice binary32's precision plus two).
func floatBits(dt comm.DType, f float64) uint64 {
	switch dt {
	case comm.F32:
		return uint64(math.Float32bits(float32(f)))
	case comm.F64:
		return math.Float64bits(f)
	case comm.F16:
		return uint64(comm.Float16FromFloat64(f))
	case comm.BF16:
		return uint64(comm.BFloat16FromFloat64(f))
	case comm.F8E4M3:
		return uint64(comm.Float8E4M3FromFloat64(f))
	case comm.F8E5M2:
		return uint64(comm.Float8E5M2FromFloat64(f))
	}
	return 0
}

// put writes the low es bytes of bits, little-endian.
func put(b []byte, es int, bits uint64) {
	switch es {
	case 1:
		b[0] = byte(bits)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(bits))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(bits))
	default:
		binary.LittleEndian.PutUint64(b, bits)
	}
}

// get reads an element of es bytes.
func get(b []byte, es int) uint64 {
	switch es {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	default:
		return binary.LittleEndian.Uint64(b)
	}
}

// mask keeps the low es bytes.
func mask(es int) uint64 {
	if es >= 8 {
		return math.MaxUint64
	}
	return 1<<(8*es) - 1
}

// fill writes rank r's input, elements base, base+1, … into b.
func (g gen) fill(b comm.Buffer, r, base int) {
	es, raw := g.dt.Size(), b.Bytes()
	for i := range b.Len() {
		put(raw[i*es:], es, bitsOf(g.dt, g.value(r, base+i)))
	}
}

// poison fills b with a pattern that no check value has, so an element
// that the operation never writes is counted wrong.
func poison(b comm.Buffer) {
	raw := b.Bytes()
	for i := range raw {
		raw[i] = 0xa5
	}
}

// countWrong counts the elements of b that differ from want(i).
func countWrong(b comm.Buffer, want func(i int) uint64) int64 {
	es, raw, m := b.DType().Size(), b.Bytes(), mask(b.DType().Size())
	var wrong int64
	for i := range b.Len() {
		if get(raw[i*es:], es) != want(i)&m {
			wrong++
		}
	}
	return wrong
}

// check fills c's buffers with rank-distinct data, runs it once through run
// and returns the number of wrong elements on this rank.
func (c call) check(g gen, rank, p int, run func() error) (int64, error) {
	n := c.recv.Len() // elements of this rank's result
	// Poison first: in place, the send is (or holds) the receive buffer,
	// and its data must survive.
	if !c.recv.IsZero() {
		poison(c.recv)
	}
	g.fill(c.send, rank, 0) // Broadcast: send is recv, and the root's data wins everywhere
	if err := run(); err != nil {
		return 0, err
	}
	if c.recv.IsZero() { // Reduce off the root: nothing to check
		return 0, nil
	}
	var want func(i int) uint64
	switch c.def.kind {
	case comm.KindAllReduce, comm.KindReduce:
		want = g.reduced
	case comm.KindReduceScatter:
		want = func(i int) uint64 { return g.reduced(rank*n + i) }
	case comm.KindAllGather:
		per := n / p
		want = func(i int) uint64 { return bitsOf(g.dt, g.value(i/per, i%per)) }
	case comm.KindAllToAll:
		// Block j of the result is block rank of rank j's send.
		per := n / p
		want = func(i int) uint64 { return bitsOf(g.dt, g.value(i/per, rank*per+i%per)) }
	case comm.KindBroadcast:
		want = func(i int) uint64 { return bitsOf(g.dt, g.value(c.root, i)) }
	case comm.KindSend:
		want = func(i int) uint64 { return bitsOf(g.dt, g.value(c.left, i)) }
	}
	return countWrong(c.recv, want), nil
}
