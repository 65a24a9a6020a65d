package nexar

import (
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
)

// gather: every rank sends its block straight to the root, which receives
// them all at once (the root's link is the bottleneck either way).
func gather(o *op, send, recv []byte, root, es int) error {
	P, r := o.size(), o.rank()
	if r != root {
		return o.sendMsg(root, 0, send, es)
	}
	n := len(send)
	copy(recv[r*n:(r+1)*n], send)
	fs := make([]func() error, 0, P-1)
	for j := range P {
		if j != root {
			fs = append(fs, func() error { return o.recvMsg(j, 0, recv[j*n:(j+1)*n], es, nil, false) })
		}
	}
	return o.parallel(fs...)
}

// scatter: the root sends block j straight to rank j.
func scatter(o *op, send, recv []byte, root, es int) error {
	P, r := o.size(), o.rank()
	if r != root {
		return o.recvMsg(root, 0, recv, es, nil, false)
	}
	n := len(recv)
	copy(recv, send[r*n:(r+1)*n])
	for s := 1; s < P; s++ { // start with the next rank, so roots spread their load
		j := mod(r+s, P)
		if err := o.sendMsg(j, 0, send[j*n:(j+1)*n], es); err != nil {
			return err
		}
	}
	return nil
}

// allToAll is the pairwise exchange: at step s = 1…P−1 rank r sends its
// block for r+s and receives the block from r−s; sends and receives run at
// once. counts are in elements. With checkCounts (AllToAllV), each frame
// says how many elements its sender meant for this rank, and a count that
// differs from this rank's recvCounts is a mismatch naming both.
func allToAll(o *op, send []byte, sendCounts []int, recv []byte, recvCounts []int, es int, checkCounts bool) error {
	P, r := o.size(), o.rank()
	sendOff, recvOff := comm.Offsets(sendCounts, es), comm.Offsets(recvCounts, es)
	block := func(buf []byte, off []int, counts []int, j int) []byte {
		return buf[off[j] : off[j]+counts[j]*es]
	}
	copy(block(recv, recvOff, recvCounts, r), block(send, sendOff, sendCounts, r))
	if checkCounts && sendCounts[r] != recvCounts[r] {
		return &comm.ArgError{Kind: comm.KindAllToAllV, Arg: fmt.Sprintf("recvCounts[%d]", r),
			Problem: fmt.Sprintf("is %d but sendCounts[%d] is %d (this rank's message to itself)", recvCounts[r], r, sendCounts[r])}
	}
	seg := o.segBytes(es)
	sender := func() error {
		for s := 1; s < P; s++ {
			j := mod(r+s, P)
			data := block(send, sendOff, sendCounts, j)
			for i := range pieces(len(data), seg) {
				piece := data[i*seg : min(len(data), (i+1)*seg)]
				var err error
				if checkCounts {
					err = o.sendCount(j, uint32(i), piece, int64(sendCounts[j]))
				} else {
					err = o.send(j, uint32(i), piece)
				}
				if err != nil {
					return err
				}
			}
		}
		return nil
	}
	receiver := func() error {
		for s := 1; s < P; s++ {
			j := mod(r-s, P)
			dst := block(recv, recvOff, recvCounts, j)
			for i := range pieces(len(dst), seg) {
				f, err := o.recvFrame(j, uint32(i))
				if err != nil {
					return err
				}
				if checkCounts && f.h.Sig.Count != int64(recvCounts[j]) {
					putBuf(f.payload)
					remote := o.sig
					remote.Count = f.h.Sig.Count
					return &comm.MismatchError{Peer: j, Seq: o.seq, Local: o.sig, Remote: remote,
						Reported: fmt.Sprintf("rank %d sends %d elements to rank %d, whose recvCounts[%d] is %d", j, f.h.Sig.Count, r, j, recvCounts[j])}
				}
				part := dst[i*seg : min(len(dst), (i+1)*seg)]
				if len(f.payload) != len(part) {
					putBuf(f.payload)
					return o.sizeError(j, len(f.payload), len(part))
				}
				copy(part, f.payload)
				putBuf(f.payload)
			}
		}
		return nil
	}
	return o.parallel(sender, receiver)
}

// scan is Hillis–Steele: in round i (distance d = 2^i) rank r sends its
// inclusive partial to r+d and combines the one from r−d in front of its
// own, so after ⌈log₂ P⌉ rounds incl(r) = x₀ op … op x_r. For ExScan the
// exclusive partial (x₀ … x_{r−1}) is kept the same way; rank 0, which has
// no predecessor, gets the op's identity (comm.FillIdentity).
func scan(o *op, send, recv []byte, k kernel, exclusive bool) error {
	P, r := o.size(), o.rank()
	incl := recv
	if exclusive {
		incl = make([]byte, len(send))
	}
	copyIfApart(incl, send)
	var excl []byte // the exclusive partial so far; nil until something arrives
	got := make([]byte, len(send))
	var tmp []byte
	round := 0
	for d := 1; d < P; d <<= 1 {
		if r+d < P {
			if err := o.sendMsg(r+d, round, incl, k.es); err != nil {
				return err
			}
		}
		if r-d >= 0 {
			if err := o.recvMsg(r-d, round, got, k.es, nil, false); err != nil {
				return err
			}
			if exclusive {
				if excl == nil {
					excl = recv
					copy(excl, got)
				} else {
					if tmp == nil {
						tmp = make([]byte, len(send))
					}
					copy(tmp, got)
					k.red(tmp, excl) // lower ranks first
					copy(excl, tmp)
				}
			}
			k.red(got, incl)
			copy(incl, got)
		}
		round++
	}
	if exclusive && r == 0 {
		comm.FillIdentity(k.dt, k.op, recv)
	}
	return nil
}

// barrier is the dissemination barrier: in round i rank r signals r+2^i and
// waits for r−2^i; after ⌈log₂ P⌉ rounds every rank has heard, directly or
// not, from every other.
func barrier(o *op) error {
	P, r := o.size(), o.rank()
	round := 0
	for d := 1; d < P; d <<= 1 {
		if err := o.send(mod(r+d, P), uint32(round), nil); err != nil {
			return err
		}
		p, err := o.recv(mod(r-d, P), uint32(round))
		if err != nil {
			return err
		}
		putBuf(p)
		round++
	}
	return nil
}
