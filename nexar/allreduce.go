package nexar

import (
	"github.com/hiercomm/hiercomm/comm"
)

// allReduce reduces buf (already holding this rank's input) across the
// communicator in place, with the schedule the cost model picks.
func allReduce(o *op, buf []byte, k kernel) error {
	if o.size() == 1 {
		return nil
	}
	if o.c.opt.Cost.allReduce(len(buf), o.size()) == algoDoubling {
		return doublingAllReduce(o, buf, k)
	}
	return ringAllReduce(o, buf, k)
}

// ringAllReduce is the bandwidth-optimal ring: P−1 reduce-scatter stages
// then P−1 all-gather stages. Stage t sends one block to the right
// neighbour and receives one from the left:
//
//	reduce-scatter (t < P−1):  send block r−t,        receive block r−t−1 and reduce it in
//	all-gather     (u = t−P+1): send block r+1−u,      receive block r−u and copy it in
//
// so after the reduce-scatter stages rank r holds the complete block r+1,
// which the all-gather stages pass around. Each block is cut into S
// segments and the stages are pipelined per segment: segment k of stage t
// leaves as soon as segment k of stage t−1 has arrived and been reduced, so
// sending, receiving and reducing overlap. Every element of a block is
// reduced once, in ring order, on one rank, so every rank ends with the same
// bits.
func ringAllReduce(o *op, buf []byte, k kernel) error {
	P, r := o.size(), o.rank()
	n := len(buf) / k.es
	_, maxBlock := blockRange(n, P, 0)
	S := segmentsFor(maxBlock, o.segBytes(k.es)/k.es)
	segment := func(block, s int) []byte {
		off, ln := blockRange(n, P, block)
		so, sl := blockRange(ln, S, s)
		return buf[(off+so)*k.es : (off+so+sl)*k.es]
	}
	sendBlock := func(t int) int {
		if t < P-1 {
			return mod(r-t, P)
		}
		return mod(r+1-(t-P+1), P)
	}
	recvBlock := func(t int) int {
		if t < P-1 {
			return mod(r-t-1, P)
		}
		return mod(r-(t-P+1), P)
	}
	return o.ringPipeline(2*(P-1), S,
		func(t, s int) []byte { return segment(sendBlock(t), s) },
		func(t, s int, p []byte) error {
			dst := segment(recvBlock(t), s)
			if len(p) != len(dst) {
				return o.sizeError(mod(r-1, P), len(p), len(dst))
			}
			if t >= P-1 {
				copy(dst, p)
				return nil
			}
			k.red(dst, p)
			if t == P-2 && k.avg {
				comm.FinishAvg(k.dt, dst, P)
			}
			return nil
		})
}

// doublingAllReduce is recursive doubling, the latency-optimal schedule for
// small messages: ⌊log₂ P⌋ exchange rounds of the whole vector, plus one
// round in and one out when P is not a power of two (the first 2·rem ranks
// pair up; the even one of each pair hands its vector to the odd one and
// waits for the result). In every exchange both partners compute
// lower op higher, so all ranks end with the same bits.
func doublingAllReduce(o *op, buf []byte, k kernel) error {
	P, r := o.size(), o.rank()
	pof2 := 1
	for pof2*2 <= P {
		pof2 *= 2
	}
	rem := P - pof2
	virt := r - rem // rank among the pof2 participants, or -1
	if r < 2*rem {
		if r%2 == 0 {
			if err := o.sendMsg(r+1, 0, buf, k.es); err != nil {
				return err
			}
			virt = -1
		} else {
			if err := o.recvMsg(r-1, 0, buf, k.es, k.red, true); err != nil {
				return err
			}
			virt = r / 2
		}
	}
	real := func(v int) int {
		if v < rem {
			return 2*v + 1
		}
		return v + rem
	}
	if virt >= 0 {
		round := 1
		for mask := 1; mask < pof2; mask <<= 1 {
			pv := virt ^ mask
			peer := real(pv)
			if err := o.sendMsg(peer, round, buf, k.es); err != nil {
				return err
			}
			if err := o.recvMsg(peer, round, buf, k.es, k.red, pv < virt); err != nil {
				return err
			}
			round++
		}
		if k.avg {
			comm.FinishAvg(k.dt, buf, P)
		}
	}
	last := 1 + ceilLog2(pof2) + 1
	if r < 2*rem {
		if r%2 == 1 {
			return o.sendMsg(r-1, last, buf, k.es)
		}
		return o.recvMsg(r+1, last, buf, k.es, nil, false)
	}
	return nil
}
