package nexar

import (
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/schedule"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/internal/hoptrace"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// run executes this rank's schedule s over the op's frames, with the
// caller's send and recv and the kernel k (only Size is set for a
// collective that does not reduce). A one-lane schedule runs on the
// calling goroutine; otherwise each lane gets a goroutine, and a lane that
// another waits for counts its finished steps on a channel, so a pipelined
// ring sends segment s of stage t as soon as segment s of stage t−1 has
// been received and reduced. The first error ends every lane.
//
// A lane that another waits for passes the index of each step it finishes
// on its ticks channel (buffered for every step, so it never blocks); as a
// lane's steps come in index order, its one waiter (schedule.Schedule
// promises one) waits for step i by taking ticks until it sees i or later.
func (o *op) run(s schedule.Schedule, send, recv []byte, k tier.Kernel) error {
	if s.Lanes > 1 {
		return o.runLanes(s, send, recv, k)
	}
	// One lane: the runner stays on this stack and its few temp slots
	// are the op's (reused with it: Comm.newOp), so a small collective
	// allocates nothing here.
	x := runner{o: o, s: s, send: send, recv: recv, k: k}
	if n := len(s.Temps); n <= len(o.slots) {
		x.temps = o.slots[:n]
	} else {
		x.temps = make([][]byte, n)
	}
	defer x.release()
	for i := range s.Steps {
		if err := x.step(i); err != nil {
			return err
		}
	}
	return nil
}

// runLanes is run for a schedule of several lanes.
func (o *op) runLanes(s schedule.Schedule, send, recv []byte, k tier.Kernel) error {
	x := &runner{o: o, s: s, send: send, recv: recv, k: k, temps: make([][]byte, len(s.Temps))}
	defer x.release()
	x.ticks = make([]chan int, s.Lanes)
	x.seen = make([]int, s.Lanes)
	for l, w := range s.Waited {
		if w {
			x.ticks[l] = make(chan int, len(s.Steps))
			x.seen[l] = -1
		}
	}
	fs := make([]func() error, s.Lanes)
	for l := range fs {
		fs[l] = func() error {
			for i := range s.Steps {
				if s.Steps[i].Lane != l {
					continue
				}
				if err := x.wait(s.Steps[i].After); err != nil {
					return err
				}
				if err := x.step(i); err != nil {
					return err
				}
				if x.ticks[l] != nil {
					x.ticks[l] <- i
				}
			}
			return nil
		}
	}
	return o.parallel(fs...)
}

// runner is one execution of a schedule. temps[k] is temp slot k's memory
// (nil until first written): a slot is touched by one lane at a time, the
// handover ordered by the ticks channel. seen[l] is the last step of lane l
// that its waiting lane has taken from ticks[l]; only that lane touches it.
type runner struct {
	o          *op
	s          schedule.Schedule
	send, recv []byte
	k          tier.Kernel
	temps      [][]byte
	ticks      []chan int
	seen       []int
}

// wait blocks until step after (of another lane) is done; -1 is no step.
func (x *runner) wait(after int) error {
	if after < 0 {
		return nil
	}
	l := x.s.Steps[after].Lane
	for x.seen[l] < after {
		select {
		case x.seen[l] = <-x.ticks[l]:
		case <-x.o.done:
			return x.o.err
		}
	}
	return nil
}

// bytes is the memory of r, bringing its temp slot into being if need be.
func (x *runner) bytes(r schedule.Range) []byte {
	es := x.k.Size
	var b []byte
	switch r.Buf {
	case schedule.SendBuf:
		b = x.send
	case schedule.RecvBuf:
		b = x.recv
	case schedule.TempBuf:
		if x.temps[r.Slot] == nil {
			x.temps[r.Slot] = transport.GetBuf(x.s.Temps[r.Slot] * es)
		}
		b = x.temps[r.Slot]
	}
	return b[r.Off*es : (r.Off+r.Len)*es]
}

// free ends temp slot k.
func (x *runner) free(k int) {
	transport.PutBuf(x.temps[k])
	x.temps[k] = nil
}

// release gives back the temp slots still held (on an error, or slots the
// schedule left live).
func (x *runner) release() {
	for k := range x.temps {
		x.free(k)
	}
}

func (x *runner) step(i int) error {
	st := &x.s.Steps[i]
	o := x.o
	switch st.Kind {
	case schedule.Send:
		data := x.bytes(st.Src)
		var err error
		if st.Announce {
			err = o.sendCount(st.Peer, st.Tag, data, int64(st.Src.Len))
		} else {
			err = o.send(st.Peer, st.Tag, data)
		}
		if err != nil {
			return err
		}
	case schedule.Recv:
		err := x.receive(st)
		hoptrace.Mark(hoptrace.Done, o.c.w.rank, o.c.members[st.Peer], o.seq, st.Tag)
		return err
	case schedule.Local:
		src, dst := x.bytes(st.Src), x.bytes(st.Dst)
		x.combine(st.Op, dst, src, st.Free)
	case schedule.Finish:
		x.k.Finish(x.bytes(st.Dst), o.size())
	case schedule.Identity:
		tier.FillIdentity(x.k.DType, x.k.Op, x.bytes(st.Dst))
	}
	if st.Free {
		x.free(st.Src.Slot)
	}
	return nil
}

// receive runs a Recv step. A frame copied into a whole temp slot that is
// not yet live becomes the slot (no copy): the ring reduce-scatter's
// partials travel that way. A frame copied into the receive buffer may
// land there straight from the socket (landing.go): then it is there
// already.
func (x *runner) receive(st *schedule.Step) error {
	o := x.o
	var p, land []byte
	if st.Op == schedule.Copy && st.Dst.Buf == schedule.RecvBuf {
		land = x.bytes(st.Dst)
	}
	if st.Announce {
		f, err := o.recvFrame(st.Peer, st.Tag, nil)
		if err != nil {
			return err
		}
		if p = f.payload; f.h.Sig.Count != int64(st.Dst.Len) {
			transport.PutBuf(p)
			remote := o.sig
			remote.Count = f.h.Sig.Count
			return &comm.MismatchError{Peer: st.Peer, Seq: o.seq, Local: o.sig, Remote: remote,
				Reported: fmt.Sprintf("rank %d sends %d elements to rank %d, whose recvCounts[%d] is %d", st.Peer, f.h.Sig.Count, o.rank(), st.Peer, st.Dst.Len)}
		}
	} else {
		var err error
		if p, err = o.recv(st.Peer, st.Tag, land); err != nil {
			return err
		}
		if sameMemory(p, land) {
			return nil // landed
		}
	}
	want := st.Dst.Len * x.k.Size
	if len(p) != want {
		transport.PutBuf(p)
		return o.sizeError(st.Peer, len(p), want)
	}
	if d := st.Dst; d.Buf == schedule.TempBuf && st.Op == schedule.Copy && x.temps[d.Slot] == nil && d.Off == 0 && d.Len == x.s.Temps[d.Slot] {
		x.temps[d.Slot] = p
		return nil
	}
	x.combine(st.Op, x.bytes(st.Dst), p, true)
	transport.PutBuf(p)
	return nil
}

// combine applies op to dst with src; with spent, src is not needed
// afterwards and may serve as scratch.
func (x *runner) combine(op schedule.Op, dst, src []byte, spent bool) {
	switch op {
	case schedule.Copy:
		if len(dst) > 0 && &dst[0] != &src[0] {
			copy(dst, src)
		}
	case schedule.Reduce:
		x.k.Reduce(dst, src)
	case schedule.ReduceFirst:
		if !spent {
			tmp := transport.GetBuf(len(src))
			copy(tmp, src)
			defer transport.PutBuf(tmp)
			src = tmp
		}
		x.k.Reduce(src, dst)
		copy(dst, src)
	}
}
