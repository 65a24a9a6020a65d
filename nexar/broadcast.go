package nexar

// broadcast copies the root's buf to every rank, by a binomial tree for
// small messages or a pipelined chain for large ones (the cost model picks).
func broadcast(o *op, buf []byte, root, es int) error {
	if o.size() == 1 {
		return nil
	}
	if o.c.opt.Cost.broadcast(len(buf), o.size(), o.segBytes(es)) == algoTree {
		return treeBroadcast(o, buf, root, es)
	}
	return chainBroadcast(o, buf, root, es)
}

// treeBroadcast is the binomial tree: in relative ranks v = r − root, rank v
// receives from v − 2^j for the lowest set bit j of v, then sends to
// v + 2^i for every i below j (largest first), ⌈log₂ P⌉ rounds in all.
func treeBroadcast(o *op, buf []byte, root, es int) error {
	P, r := o.size(), o.rank()
	v := mod(r-root, P)
	mask := 1
	for mask < P {
		if v&mask != 0 {
			if err := o.recvMsg(mod(v-mask+root, P), 0, buf, es, nil, false); err != nil {
				return err
			}
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < P {
			if err := o.sendMsg(mod(v+mask+root, P), 0, buf, es); err != nil {
				return err
			}
		}
	}
	return nil
}

// chainBroadcast passes buf down the chain root, root+1, …, root−1 in
// segments: each rank forwards segment s as soon as it has it, so for S
// segments the time is (P−2+S) segment steps instead of (P−1)·S.
func chainBroadcast(o *op, buf []byte, root, es int) error {
	P, r := o.size(), o.rank()
	v := mod(r-root, P)
	seg := o.segBytes(es)
	S := pieces(len(buf), seg)
	piece := func(s int) []byte { return buf[s*seg : min(len(buf), (s+1)*seg)] }
	next, prev := mod(r+1, P), mod(r-1, P)
	last := v == P-1
	if v == 0 {
		for s := range S {
			if err := o.send(next, uint32(s), piece(s)); err != nil {
				return err
			}
		}
		return nil
	}
	fwd := make(chan []byte, S)
	receiver := func() error {
		for s := range S {
			p, err := o.recv(prev, uint32(s))
			if err != nil {
				return err
			}
			dst := piece(s)
			if len(p) != len(dst) {
				putBuf(p)
				return o.sizeError(prev, len(p), len(dst))
			}
			copy(dst, p)
			if last {
				putBuf(p)
			} else {
				fwd <- p
			}
		}
		return nil
	}
	if last {
		return receiver()
	}
	sender := func() error {
		for s := range S {
			var p []byte
			select {
			case p = <-fwd:
			case <-o.ctx.Done():
				return waitCtx(o.ctx)
			}
			err := o.send(next, uint32(s), p)
			putBuf(p)
			if err != nil {
				return err
			}
		}
		return nil
	}
	return o.parallel(sender, receiver)
}
