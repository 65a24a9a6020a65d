package nexar

import "github.com/hiercomm/hiercomm/comm"

// reduce combines every rank's send into recv at the root over a binomial
// tree, pipelined by segment: in relative ranks v = r − root, rank v's
// children are v + 2^i for every i below the lowest set bit of v (all i for
// the root), its parent v − 2^j for that bit j. For each segment a rank
// reduces its own part with its children's (in increasing order, so the
// reduction order is fixed) and passes the result up while it works on the
// next segment.
func reduce(o *op, send, recv []byte, root int, k kernel) error {
	P, r := o.size(), o.rank()
	v := mod(r-root, P)
	isRoot := v == 0
	if isRoot {
		copyIfApart(recv, send)
	}
	var children []int
	parent := -1
	for mask := 1; mask < P; mask <<= 1 {
		if v&mask != 0 {
			parent = mod(v-mask+root, P)
			break
		}
		if v+mask < P {
			children = append(children, mod(v+mask+root, P))
		}
	}
	seg := o.segBytes(k.es)
	S := pieces(len(send), seg)
	type partial struct {
		s      int
		data   []byte
		pooled bool // data came from getBuf and goes back after sending
	}
	up := make(chan partial, S)
	receiver := func() error {
		for s := range S {
			lo, hi := s*seg, min(len(send), (s+1)*seg)
			acc := partial{s: s, data: send[lo:hi]}
			switch {
			case isRoot:
				acc.data = recv[lo:hi]
			case len(children) > 0:
				acc.data, acc.pooled = getBuf(hi-lo), true
				copy(acc.data, send[lo:hi])
			}
			for _, ch := range children {
				p, err := o.recv(ch, uint32(s))
				if err != nil {
					return err
				}
				if len(p) != len(acc.data) {
					putBuf(p)
					return o.sizeError(ch, len(p), len(acc.data))
				}
				k.red(acc.data, p)
				putBuf(p)
			}
			if isRoot {
				if k.avg {
					comm.FinishAvg(k.dt, acc.data, P)
				}
				continue
			}
			up <- acc
		}
		return nil
	}
	if isRoot {
		return receiver()
	}
	sender := func() error {
		for range S {
			var a partial
			select {
			case a = <-up:
			case <-o.ctx.Done():
				return waitCtx(o.ctx)
			}
			err := o.send(parent, uint32(a.s), a.data)
			if a.pooled {
				putBuf(a.data)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	return o.parallel(sender, receiver)
}
