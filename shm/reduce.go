package shm

import (
	"github.com/hiercomm/hiercomm/comm"
)

// The reducing schedules. Every reduction runs in rank order (rank 0's
// data, then rank 1's, …) whichever rank computes it, so that a reducing
// collective gives every rank the same bits.

// kernel is what the reducing schedules need of the dtype and op.
type kernel struct {
	dt  comm.DType
	op  comm.ReduceOp
	es  int
	red func(dst, src []byte)
	avg bool
}

func newKernel(dt comm.DType, op comm.ReduceOp) (kernel, error) {
	red, err := comm.ReduceFunc(dt, op)
	if err != nil {
		return kernel{}, err
	}
	return kernel{dt: dt, op: op, es: dt.Size(), red: red, avg: op == comm.Avg}, nil
}

// reduceBlock is the cache blocking of reduceInto: one block of the
// accumulator stays in L1 while every rank's block is folded into it.
const reduceBlock = 16 << 10

// reduceInto sets dst to src(0) op src(1) op … op src(n-1), each src(q)
// as long as dst.
func (k kernel) reduceInto(dst []byte, n int, src func(q int) []byte) {
	for b := 0; b < len(dst); b += reduceBlock {
		e := min(len(dst), b+reduceBlock)
		d := dst[b:e]
		copy(d, src(0)[b:e])
		for q := 1; q < n; q++ {
			k.red(d, src(q)[b:e])
		}
	}
}

// finish divides an Avg result by the number of ranks.
func (k kernel) finish(dst []byte, P int) {
	if k.avg {
		comm.FinishAvg(k.dt, dst, P)
	}
}

// smallReduceBytes: up to this many bytes from all ranks together (the
// message's size × P), AllReduce and Reduce take one step in which every
// rank (the root, for Reduce) reduces the whole message from every rank's
// part, instead of the direct algorithm's two steps. Measured on 2 cores:
// at 4 ranks, 4 KiB messages are faster in one step and 16 KiB ones in
// two; at 2 and 8 ranks the cut falls at the same total. A variable so
// that benchmarks can move it.
var smallReduceBytes = 16 << 10

// allReduce is AllReduce (root < 0) and Reduce (to root).
//
// Large messages use the direct algorithm, pipelined in chunks: in step i
// every rank stages chunk i of its input; after the wait, rank r reduces
// slice r of chunk i from every rank's part and writes the result into
// its next part, beside the staging of chunk i+1; in step i+1 every rank
// (the root, for Reduce) copies the reduced slices of chunk i out of
// everyone's part. So each step both reduces one chunk and copies out the
// one before, K chunks take K+1 steps, and the reduction work is spread
// over all ranks.
func allReduce(s *stepper, send, recv []byte, k kernel, root int) error {
	P, me, es := s.c.size, s.c.rank, k.es
	out := root < 0 || root == me
	if n := len(send); n*P <= smallReduceBytes && n <= s.half() {
		if err := s.step(func(p []byte) { copy(p, send) }); err != nil {
			return err
		}
		if out {
			k.reduceInto(recv, P, s.read)
			k.finish(recv, P)
		}
		return nil
	}
	N := len(send) / es
	c := P * ((s.half() - lineBytes) / es / (P + 1)) // elements per chunk, a multiple of P
	resOff := alignUp(c*es, lineBytes)               // where a rank's reduced slice sits in its part
	K := (N + c - 1) / c
	chunk := func(i int) (lo, cnt int) { return i * c, min(c, N-i*c) }
	slice := func(cnt, q int) (lo, hi int) { return q * cnt / P, (q + 1) * cnt / P }
	for i := 0; i <= K; i++ {
		var write func([]byte)
		if i < K {
			// This rank's own slice is reduced from send itself: only
			// the slices the other ranks reduce are staged.
			lo, cnt := chunk(i)
			a, b := slice(cnt, me)
			write = func(p []byte) {
				copy(p[:a*es], send[lo*es:(lo+a)*es])
				copy(p[b*es:cnt*es], send[(lo+b)*es:(lo+cnt)*es])
			}
		}
		if err := s.step(write); err != nil {
			return err
		}
		if i > 0 && out {
			lo, cnt := chunk(i - 1)
			for q := range P {
				a, b := slice(cnt, q)
				copy(recv[(lo+a)*es:(lo+b)*es], s.read(q)[resOff:resOff+(b-a)*es])
			}
		}
		if i < K {
			lo, cnt := chunk(i)
			a, b := slice(cnt, me)
			dst := s.next()[resOff : resOff+(b-a)*es]
			own := send[(lo+a)*es : (lo+b)*es]
			k.reduceInto(dst, P, func(q int) []byte {
				if q == me {
					return own
				}
				return s.read(q)[a*es : b*es]
			})
			k.finish(dst, P)
		}
	}
	return nil
}

// blockBytes is the share of a part that each destination rank gets when a
// step carries a piece of every rank's block: a whole number of lines
// (so of elements) when it can be.
func (s *stepper) blockBytes(es int) int {
	b := s.half() / s.c.size
	if b >= lineBytes {
		return b &^ (lineBytes - 1)
	}
	return max(es, b/es*es)
}

// reduceScatter is the direct ReduceScatter: in every step each rank stages
// a piece of every block of its input, and rank r reduces the pieces of
// block r from every rank's part straight into its result. One step per
// piece, no copy-out.
func reduceScatter(s *stepper, send, recv []byte, k kernel) error {
	P, me := s.c.size, s.c.rank
	m := len(recv)
	B := s.blockBytes(k.es)
	K := max(1, (m+B-1)/B)
	for i := range K {
		lo := i * B
		cnt := min(B, m-lo)
		if err := s.step(func(p []byte) {
			for j := range P {
				copy(p[j*B:j*B+cnt], send[j*m+lo:j*m+lo+cnt])
			}
		}); err != nil {
			return err
		}
		dst := recv[lo : lo+cnt]
		k.reduceInto(dst, P, func(q int) []byte { return s.read(q)[me*B : me*B+cnt] })
		k.finish(dst, P)
	}
	return nil
}

// scan is Scan (inclusive) and ExScan: rank r reduces the staged chunks of
// ranks 0…r (0…r-1), and rank 0 of an ExScan gets the op's identity.
func scan(s *stepper, send, recv []byte, k kernel, exclusive bool) error {
	me := s.c.rank
	n := len(send)
	C := s.half() / k.es * k.es
	K := max(1, (n+C-1)/C)
	upto := me + 1
	if exclusive {
		upto = me
	}
	for i := range K {
		lo := i * C
		cnt := min(C, n-lo)
		if err := s.step(func(p []byte) { copy(p, send[lo:lo+cnt]) }); err != nil {
			return err
		}
		dst := recv[lo : lo+cnt]
		if upto == 0 {
			comm.FillIdentity(k.dt, k.op, dst)
			continue
		}
		k.reduceInto(dst, upto, func(q int) []byte { return s.read(q)[:cnt] })
	}
	return nil
}
