package shm

import (
	"github.com/hiercomm/hiercomm/comm/tier"
)

// The reducing schedules. Every reduction runs in rank order (rank 0's
// data, then rank 1's, …) whichever rank computes it, so that a reducing
// collective gives every rank the same bits.

// reduceBlock is the cache blocking of reduceInto: one block of the
// accumulator stays in L1 while every rank's block is folded into it.
const reduceBlock = 16 << 10

// reduceInto sets dst to src(0) op src(1) op … op src(n-1), each src(q)
// as long as dst, block by block; with an Avg kernel each block is then
// divided by n (Scan and ExScan never have one: Validate refuses Avg).
// With also set (as long as dst), each finished block is copied there too,
// with put, while it is in L1: the direct AllReduce's own slice reaches
// the rank's recv without another pass over memory.
func reduceInto(k tier.Kernel, dst, also []byte, put func(dst, src []byte), n int, src func(q int) []byte) {
	for b := 0; b < len(dst); b += reduceBlock {
		e := min(len(dst), b+reduceBlock)
		d := dst[b:e]
		copy(d, src(0)[b:e])
		for q := 1; q < n; q++ {
			k.Reduce(d, src(q)[b:e])
		}
		k.Finish(d, n)
		if also != nil {
			put(also[b:e], d)
		}
	}
}

// allReduce is AllReduce (root < 0) and Reduce (to root).
//
// Small messages (oneStep: Config.Cost's choice, or the switch
// Config.SmallReduceBytes gives it) take one step:
// every rank stages its input, and every rank (the root, for Reduce)
// reduces the whole message from every rank's part.
//
// Large messages use the direct algorithm, pipelined in chunks: in step i
// every rank stages chunk i of its input, but for its own slice; after the
// wait, rank r reduces slice r of chunk i from every rank's part (its own
// slice straight from its input) into its next part, beside the staging of
// chunk i+1, copying each reduced block into its own recv while it is in
// L1; in step i+1 every rank (the root, for Reduce) copies the other
// ranks' reduced slices of chunk i out of their parts. So each step both
// reduces one chunk and copies out the one before, K chunks take K+1
// steps, the reduction work is spread over all ranks, and every byte of a
// rank's input and result crosses memory as few times as shared staging
// allows: staged once, read once by its reducer, published once, copied
// out once by each other rank.
func allReduce(s *stepper, send, recv []byte, k tier.Kernel, root int) error {
	P, me, es := s.c.size, s.c.rank, k.Size
	out := root < 0 || root == me
	if s.c.oneStep(len(send)) {
		if err := s.step(func(p []byte) { copy(p, send) }); err != nil {
			return err
		}
		if out {
			reduceInto(k, recv, nil, nil, P, s.read)
		}
		return nil
	}
	N := len(send) / es
	// Elements per chunk, a multiple of P: the whole chunk and the rank's
	// reduced slice must fit in a part, and the chunk in stepMax.
	c := P * max(1, min((s.half()-lineBytes)/es/(P+1), s.stepMax()/es/P))
	resOff := alignUp(c*es, lineBytes) // where a rank's reduced slice sits in its part
	K := (N + c - 1) / c
	chunk := func(i int) (lo, cnt int) { return i * c, min(c, N-i*c) }
	slice := func(cnt, q int) (lo, hi int) { return q * cnt / P, (q + 1) * cnt / P }
	put := s.putFor(s.resultBytes(len(recv), root))
	var mine []byte // this rank's recv slice of the chunk being reduced (nil: not wanted)
	for i := 0; i <= K; i++ {
		var write func([]byte)
		if i < K {
			// This rank's own slice is reduced from send itself: only
			// the slices the other ranks reduce are staged.
			lo, cnt := chunk(i)
			a, b := slice(cnt, me)
			write = func(p []byte) {
				stage(p[:a*es], send[lo*es:(lo+a)*es])
				stage(p[b*es:cnt*es], send[(lo+b)*es:(lo+cnt)*es])
			}
		}
		if err := s.step(write); err != nil {
			return err
		}
		if i > 0 && out {
			lo, cnt := chunk(i - 1)
			for q := range P {
				if q != me {
					a, b := slice(cnt, q)
					put(recv[(lo+a)*es:(lo+b)*es], s.read(q)[resOff:resOff+(b-a)*es])
				}
			}
		}
		if i < K {
			lo, cnt := chunk(i)
			a, b := slice(cnt, me)
			dst := s.next()[resOff : resOff+(b-a)*es]
			own := send[(lo+a)*es : (lo+b)*es]
			if out {
				mine = recv[(lo+a)*es : (lo+b)*es]
			}
			reduceInto(k, dst, mine, put, P, func(q int) []byte {
				if q == me {
					return own
				}
				return s.read(q)[a*es : b*es]
			})
		}
	}
	return nil
}

// blockBytes is the share of a part (up to stepMax) that each destination
// rank gets when a step carries a piece of every rank's block: a whole
// number of lines (so of elements) when it can be.
func (s *stepper) blockBytes(es int) int {
	b := min(s.half(), s.stepMax()) / s.c.size
	if b >= lineBytes {
		return b &^ (lineBytes - 1)
	}
	return max(es, b/es*es)
}

// reduceScatter is the direct ReduceScatter: in every step each rank stages
// a piece of every other rank's block of its input, and rank r reduces the
// pieces of block r from every rank's part (its own straight from its
// input) into its result. One step per piece, no copy-out. In place (recv
// is block r of send) the rank stages its own piece too: the reduction,
// which starts from rank 0's piece, overwrites recv before it reaches
// this rank's.
func reduceScatter(s *stepper, send, recv []byte, k tier.Kernel) error {
	P, me := s.c.size, s.c.rank
	m := len(recv)
	B := s.blockBytes(k.Size)
	K := steps(m, B)
	inPlace := m > 0 && &recv[0] == &send[me*m]
	for i := range K {
		lo := i * B
		cnt := min(B, m-lo)
		if err := s.step(func(p []byte) {
			for j := range P {
				if j != me || inPlace {
					copy(p[j*B:j*B+cnt], send[j*m+lo:j*m+lo+cnt])
				}
			}
		}); err != nil {
			return err
		}
		reduceInto(k, recv[lo:lo+cnt], nil, nil, P, func(q int) []byte {
			if q == me && !inPlace {
				return send[me*m+lo : me*m+lo+cnt]
			}
			return s.read(q)[me*B : me*B+cnt]
		})
	}
	return nil
}

// scan is Scan (inclusive) and ExScan: rank r reduces the staged chunks of
// ranks 0…r (0…r-1), and rank 0 of an ExScan gets the op's identity.
func scan(s *stepper, send, recv []byte, k tier.Kernel, exclusive bool) error {
	me := s.c.rank
	n := len(send)
	C := s.chunkBytes(k.Size)
	K := steps(n, C)
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
			tier.FillIdentity(k.DType, k.Op, dst)
			continue
		}
		reduceInto(k, dst, nil, nil, upto, func(q int) []byte { return s.read(q)[:cnt] })
	}
	return nil
}
