package shm

import (
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// The schedules that move data without reducing it: the writer stages a
// chunk in its part, and after the wait every reader copies it out — one
// copy in, one copy out, whatever the number of readers. (copy.go: how
// large a step is, and how its bytes are copied.)

// schedule runs the collective of s.o after its header step would go.
func (c *Comm) schedule(s *stepper) error {
	call := s.o.call
	send, recv := tier.PreMulSend(call, call.Send.Bytes()), call.Recv.Bytes()
	es := max(1, call.Send.DType().Size(), call.Recv.DType().Size())
	var k tier.Kernel
	if call.Kind.Reduces() {
		dt := call.Send.DType()
		if call.Kind == comm.KindReduceScatter {
			dt = call.Recv.DType()
		}
		var err error
		if k, err = tier.NewKernel(dt, call.Op); err != nil {
			return err // Validate refuses such calls first
		}
	}
	switch s.o.sig.Kind {
	case comm.KindAllReduce:
		return allReduce(s, send, recv, k, -1)
	case comm.KindReduce:
		if c.eager(s.o.sig) {
			return eagerToRoot(s, send, recv, k, true, call.Root)
		}
		return allReduce(s, send, recv, k, call.Root)
	case comm.KindReduceScatter:
		return reduceScatter(s, send, recv, k)
	case comm.KindScan:
		return scan(s, send, recv, k, false)
	case comm.KindExScan:
		return scan(s, send, recv, k, true)
	case comm.KindBroadcast:
		if c.eager(s.o.sig) {
			return eagerRooted(s, recv, recv, 0, call.Root)
		}
		return broadcast(s, recv, call.Root, es)
	case comm.KindAllGather:
		return allGather(s, send, recv, es, -1)
	case comm.KindGather:
		if c.eager(s.o.sig) {
			return eagerToRoot(s, send, recv, k, false, call.Root)
		}
		return allGather(s, send, recv, es, call.Root)
	case comm.KindScatter:
		if c.eager(s.o.sig) {
			return eagerRooted(s, send, recv, c.rank*len(recv), call.Root)
		}
		return scatter(s, send, recv, call.Root, es)
	case comm.KindAllToAll:
		counts := make([]int, c.size)
		for i := range counts {
			counts[i] = call.Send.Len() / c.size
		}
		return allToAll(s, send, counts, recv, counts, es)
	case comm.KindAllToAllV:
		s.counts = make([]int64, 0, 2*c.size)
		for _, n := range call.SendCounts {
			s.counts = append(s.counts, int64(n))
		}
		for _, n := range call.RecvCounts {
			s.counts = append(s.counts, int64(n))
		}
		return allToAll(s, send, call.SendCounts, recv, call.RecvCounts, es)
	case comm.KindBarrier:
		return s.step(nil)
	case comm.KindSplit:
		return c.splitSchedule(s)
	}
	return &comm.ArgError{Kind: call.Kind, Arg: "kind", Problem: "not a collective"}
}

// chunkBytes is how much of a message one step carries through one part:
// a part's worth, up to stepMax, in whole elements.
func (s *stepper) chunkBytes(es int) int { return max(es, min(s.half(), s.stepMax())/es*es) }

// steps is the number of steps that move n bytes in chunks of C (at least
// one: the header).
func steps(n, C int) int { return max(1, (n+C-1)/C) }

// broadcast stages the root's buffer chunk by chunk; the others copy it out.
func broadcast(s *stepper, buf []byte, root, es int) error {
	me, n, C := s.c.rank, len(buf), s.chunkBytes(es)
	put := s.putFor(s.resultBytes(n, -1))
	for i := range steps(n, C) {
		lo := i * C
		cnt := min(C, n-lo)
		var write func([]byte)
		if me == root {
			write = func(p []byte) { stage(p, buf[lo:lo+cnt]) }
		}
		if err := s.step(write); err != nil {
			return err
		}
		if me != root {
			put(buf[lo:lo+cnt], s.read(root)[:cnt])
		}
	}
	return nil
}

// allGather is AllGather (root < 0) and Gather (to root): every rank stages
// its buffer chunk by chunk; every rank (the root) copies everyone's out.
func allGather(s *stepper, send, recv []byte, es, root int) error {
	P, me, n, C := s.c.size, s.c.rank, len(send), s.chunkBytes(es)
	out := root < 0 || root == me
	put := s.putFor(s.resultBytes(len(recv), root))
	inPlace := n > 0 && out && &recv[me*n] == &send[0]
	for i := range steps(n, C) {
		lo := i * C
		cnt := min(C, n-lo)
		if err := s.step(func(p []byte) { stage(p, send[lo:lo+cnt]) }); err != nil {
			return err
		}
		if !out {
			continue
		}
		for q := range P {
			switch {
			case q != me:
				put(recv[q*n+lo:q*n+lo+cnt], s.read(q)[:cnt])
			case !inPlace:
				put(recv[q*n+lo:q*n+lo+cnt], send[lo:lo+cnt])
			}
		}
	}
	return nil
}

// scatter: the root stages a piece of every block per step; rank q copies
// the pieces of block q.
func scatter(s *stepper, send, recv []byte, root, es int) error {
	P, me, m := s.c.size, s.c.rank, len(recv)
	B := s.blockBytes(es)
	for i := range steps(m, B) {
		lo := i * B
		cnt := min(B, m-lo)
		var write func([]byte)
		if me == root {
			write = func(p []byte) {
				for j := range P {
					if j != me {
						copy(p[j*B:j*B+cnt], send[j*m+lo:j*m+lo+cnt])
					}
				}
			}
		}
		if err := s.step(write); err != nil {
			return err
		}
		if me == root {
			copy(recv[lo:lo+cnt], send[me*m+lo:me*m+lo+cnt])
		} else {
			copy(recv[lo:lo+cnt], s.read(root)[me*B:me*B+cnt])
		}
	}
	return nil
}

// allToAll moves block j of every rank's send to that rank: per step, a
// piece of every block. The number of steps follows the largest block of
// any pair, which for AllToAllV is known from the headers, after the
// first step (that step's pieces only need this rank's own counts).
func allToAll(s *stepper, send []byte, sendCounts []int, recv []byte, recvCounts []int, es int) error {
	P, me := s.c.size, s.c.rank
	B := s.blockBytes(es)
	sendOff, recvOff := tier.Offsets(sendCounts, es), tier.Offsets(recvCounts, es)
	K := 1
	for i := 0; i < K; i++ {
		lo := i * B
		if err := s.step(func(p []byte) {
			for j := range P {
				if blk := sendCounts[j] * es; lo < blk {
					copy(p[j*B:], send[sendOff[j]+lo:sendOff[j]+min(blk, lo+B)])
				}
			}
		}); err != nil {
			return err
		}
		if i == 0 {
			K = s.allToAllSteps(B, es)
		}
		for q := range P {
			if blk := recvCounts[q] * es; lo < blk {
				cnt := min(B, blk-lo)
				copy(recv[recvOff[q]+lo:recvOff[q]+lo+cnt], s.read(q)[me*B:me*B+cnt])
			}
		}
	}
	return nil
}

// allToAllSteps is the number of steps of an AllToAll(V) whose pieces are
// B bytes: enough for the largest block between any two ranks. Every rank
// computes it from the same headers.
func (s *stepper) allToAllSteps(B, es int) int {
	P := s.c.size
	largest := int64(0)
	if s.counts == nil { // AllToAll: every block is the same
		largest = int64(s.o.call.Send.Len() / P)
	} else {
		for q := range P {
			for j := range P {
				largest = max(largest, s.peerCount(q, s.cur(), j))
			}
		}
	}
	return steps(int(largest)*es, B)
}
