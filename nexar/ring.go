package nexar

import "github.com/hiercomm/hiercomm/comm"

// ringReduceScatter gives rank r block r of the reduction of every rank's
// send (P blocks of len(recv) bytes), in P−1 stages around the ring. At
// stage t, rank r passes the partial sum of block r−t−1 to the right and
// receives the partial sum of block r−t−2 from the left, adds its own part
// of that block, and passes it on at the next stage; at the last stage the
// block that arrives is r itself, now complete:
//
//	stage t:  send partial(r−t−1) → r+1,   receive partial(r−t−2) ← r−1
//
// Partial sums travel in the received frame buffers (reduced in place), so
// the schedule needs no scratch memory and never writes send. Blocks are cut
// into segments and pipelined like ringAllReduce.
func ringReduceScatter(o *op, send, recv []byte, k kernel) error {
	P, r := o.size(), o.rank()
	if P == 1 {
		copyIfApart(recv, send)
		if k.avg {
			comm.FinishAvg(k.dt, recv, 1)
		}
		return nil
	}
	n := len(recv) / k.es
	S := segmentsFor(n, o.segBytes(k.es)/k.es)
	right, left := mod(r+1, P), mod(r-1, P)
	part := func(buf []byte, block, s int) []byte {
		so, sl := blockRange(n, S, s)
		base := block * n
		return buf[(base+so)*k.es : (base+so+sl)*k.es]
	}
	fwd := make(chan []byte, (P-1)*S) // partial sums received, to be passed on in order
	sender := func() error {
		for t := range P - 1 {
			for s := range S {
				if t == 0 {
					if err := o.send(right, uint32(s), part(send, mod(r-1, P), s)); err != nil {
						return err
					}
					continue
				}
				var p []byte
				select {
				case p = <-fwd:
				case <-o.ctx.Done():
					return waitCtx(o.ctx)
				}
				err := o.send(right, uint32(t*S+s), p)
				putBuf(p)
				if err != nil {
					return err
				}
			}
		}
		return nil
	}
	receiver := func() error {
		for t := range P - 1 {
			b := mod(r-t-2, P)
			for s := range S {
				p, err := o.recv(left, uint32(t*S+s))
				if err != nil {
					return err
				}
				mine := part(send, b, s)
				if len(p) != len(mine) {
					putBuf(p)
					return o.sizeError(left, len(p), len(mine))
				}
				k.red(p, mine)
				if t < P-2 {
					fwd <- p
					continue
				}
				dst := part(recv, 0, s)
				copy(dst, p)
				putBuf(p)
				if k.avg {
					comm.FinishAvg(k.dt, dst, P)
				}
			}
		}
		return nil
	}
	return o.parallel(sender, receiver)
}

// ringAllGather completes buf (P blocks, this rank's block r already in
// place) in P−1 stages: at stage t rank r sends block r−t to the right and
// receives block r−t−1 from the left, each block cut into segments and
// pipelined (segment s of stage t leaves once segment s of stage t−1 has
// arrived).
func ringAllGather(o *op, buf []byte, es int) error {
	P, r := o.size(), o.rank()
	if P == 1 {
		return nil
	}
	n := len(buf) / es / P
	S := segmentsFor(n, o.segBytes(es)/es)
	part := func(block, s int) []byte {
		so, sl := blockRange(n, S, s)
		base := block * n
		return buf[(base+so)*es : (base+so+sl)*es]
	}
	return o.ringPipeline(P-1, S,
		func(t, s int) []byte { return part(mod(r-t, P), s) },
		func(t, s int, p []byte) error {
			dst := part(mod(r-t-1, P), s)
			if len(p) != len(dst) {
				return o.sizeError(mod(r-1, P), len(p), len(dst))
			}
			copy(dst, p)
			return nil
		})
}

// ringPipeline runs a ring schedule of stages × S segments: segment s of
// stage t, out(t, s), goes to the right neighbour as soon as segment s of
// stage t−1 has arrived from the left and been handled by in(t−1, s, …),
// so sending, receiving and handling overlap. in must not keep the payload.
func (o *op) ringPipeline(stages, S int, out func(t, s int) []byte, in func(t, s int, payload []byte) error) error {
	P, r := o.size(), o.rank()
	right, left := mod(r+1, P), mod(r-1, P)
	ready := make(chan struct{}, stages*S) // one token per handled segment
	sender := func() error {
		for t := range stages {
			for s := range S {
				if t > 0 {
					select {
					case <-ready:
					case <-o.ctx.Done():
						return waitCtx(o.ctx)
					}
				}
				if err := o.send(right, uint32(t*S+s), out(t, s)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	receiver := func() error {
		for t := range stages {
			for s := range S {
				p, err := o.recv(left, uint32(t*S+s))
				if err != nil {
					return err
				}
				err = in(t, s, p)
				putBuf(p)
				if err != nil {
					return err
				}
				if t < stages-1 {
					ready <- struct{}{}
				}
			}
		}
		return nil
	}
	return o.parallel(sender, receiver)
}
