package tier

import (
	"context"
	"fmt"
	"github.com/hiercomm/hiercomm/comm"
)

// Validate checks c on its own, on a communicator of the given rank and
// size, and returns a *comm.ArgError naming the first wrong argument, or,
// for a call whose Phase (in ctx) the composed communicator refused, that
// refusal. Every implementation calls it before a collective touches the
// network, so bad input is reported the same way everywhere. What only
// the other ranks can check (that they agree) is the job of the Signature.
func Validate(ctx context.Context, c comm.Call, rank, size int) error {
	if r := PhaseOf(ctx).Refused; r != nil {
		return refusal{r}
	}
	bad := func(arg, format string, a ...any) error {
		return &comm.ArgError{Kind: c.Kind, Arg: arg, Problem: fmt.Sprintf(format, a...)}
	}
	if c.Kind == 0 || c.Kind > comm.KindRecv { // comm.KindSplit (after comm.KindRecv) is a method, not a Call
		return bad("kind", "%v is not an operation Start can run", c.Kind)
	}
	if c.Kind.Rooted() && (c.Root < 0 || c.Root >= size) {
		return bad("root", "%d is out of range [0, %d)", c.Root, size)
	}
	isRoot := c.Kind.Rooted() && c.Root == rank
	useSend, useRecv := Uses(c, rank)
	for _, b := range []struct {
		name string
		use  bool
		buf  comm.Buffer
	}{{"send", useSend, c.Send}, {"recv", useRecv, c.Recv}} {
		if b.use && !b.buf.DType().Valid() {
			if b.buf.IsZero() {
				return bad(b.name, "buffer is missing")
			}
			return bad(b.name, "dtype %v is not valid", b.buf.DType())
		}
		if b.use && b.buf.Len() < 0 {
			return bad(b.name, "negative length %d", b.buf.Len())
		}
	}
	if useSend && useRecv && c.Send.DType() != c.Recv.DType() {
		return bad("recv", "dtype %v differs from send's %v", c.Recv.DType(), c.Send.DType())
	}
	if c.Kind.Reduces() {
		dt := c.Send.DType()
		if !useSend {
			dt = c.Recv.DType()
		}
		if err := comm.CanReduce(dt, c.Op); err != nil {
			return bad("op", "%v", err)
		}
		if (c.Kind == comm.KindScan || c.Kind == comm.KindExScan) && c.Op == comm.Avg {
			return bad("op", "avg is not defined for %v (a prefix has no single divisor); use sum", c.Kind)
		}
		if c.Op == comm.PreMulSum && c.Scalar == 0 {
			return bad("scalar", "is 0: premulsum multiplies this rank's input by Call.Scalar, its factor (the blocking forms carry none: Start a Call with one)")
		}
	}
	if c.Scalar != 0 && (!c.Kind.Reduces() || c.Op != comm.PreMulSum) {
		return bad("scalar", "is %v, but only premulsum takes a factor (op is %v)", c.Scalar, c.Op)
	}
	ns, nr := c.Send.Len(), c.Recv.Len()
	lenIs := func(arg string, got, want int, what string) error {
		if got != want {
			return bad(arg, "has %d elements, want %s = %d", got, what, want)
		}
		return nil
	}
	// timesSize is lenIs for a buffer of size × other's length, described
	// only when it is wrong (no string is built for a good call).
	timesSize := func(arg string, got, other int, otherName, where string) error {
		if got != size*other {
			return bad(arg, "has %d elements, want size × len(%s) = %d × %d%s = %d", got, otherName, size, other, where, size*other)
		}
		return nil
	}
	var err error
	switch c.Kind {
	case comm.KindAllReduce, comm.KindScan, comm.KindExScan:
		err = lenIs("recv", nr, ns, "len(send)")
	case comm.KindBroadcast:
		if !comm.SameMemory(c.Send, c.Recv) {
			err = bad("buf", "Broadcast works in place: Send and Recv must be the same buffer")
		}
	case comm.KindReduce:
		if isRoot {
			err = lenIs("recv", nr, ns, "len(send) at the root")
		}
	case comm.KindAllGather:
		err = timesSize("recv", nr, ns, "send", "")
	case comm.KindReduceScatter:
		err = timesSize("send", ns, nr, "recv", "")
	case comm.KindAllToAll:
		if ns%size != 0 {
			err = bad("send", "has %d elements, not a multiple of size %d", ns, size)
		} else {
			err = lenIs("recv", nr, ns, "len(send)")
		}
	case comm.KindAllToAllV:
		err = validateCounts(c, size, bad)
	case comm.KindGather:
		if isRoot {
			err = timesSize("recv", nr, ns, "send", " at the root")
		}
	case comm.KindScatter:
		if isRoot {
			err = timesSize("send", ns, nr, "recv", " at the root")
		}
	case comm.KindSend, comm.KindRecv:
		if c.Peer < 0 || c.Peer >= size {
			err = bad("peer", "%d is out of range [0, %d)", c.Peer, size)
		} else if c.Tag < 0 {
			err = bad("tag", "%d is negative", c.Tag)
		}
	}
	if err != nil {
		return err
	}
	if useSend && useRecv && comm.Overlap(c.Send, c.Recv) && !inPlaceBlock(c, rank) {
		return bad("recv", "overlaps send without being the same memory (in place is send == recv, or for AllGather send == recv block rank, for ReduceScatter recv == send block rank)")
	}
	if useSend && useRecv && comm.SameMemory(c.Send, c.Recv) && (c.Kind == comm.KindAllToAll || c.Kind == comm.KindAllToAllV) && c.Send.Len() > 0 {
		return bad("recv", "%v cannot run in place: give it separate send and recv buffers", c.Kind)
	}
	return nil
}

// Uses reports which of c's buffers the given rank uses (Broadcast: both,
// they are one buffer); the others are ignored and may be zero.
func Uses(c comm.Call, rank int) (send, recv bool) {
	isRoot := c.Kind.Rooted() && c.Root == rank
	switch c.Kind {
	case comm.KindBarrier:
		return false, false
	case comm.KindSend:
		return true, false
	case comm.KindRecv:
		return false, true
	case comm.KindReduce, comm.KindGather:
		return true, isRoot
	case comm.KindScatter:
		return isRoot, true
	}
	return true, true
}

// WithoutBuffers is c with no buffers (or counts): a call its communicator
// rejects with a *comm.ArgError on this rank while telling the peers, which is
// how a composed communicator keeps its parts aligned after a rank's own
// bad argument (the hierarchy's phases, nccl.Staged). The Phase its
// context carries goes with it.
func WithoutBuffers(c comm.Call) comm.Call {
	return comm.Call{Kind: c.Kind, Op: c.Op, Scalar: c.Scalar, Root: c.Root, Peer: c.Peer, Tag: c.Tag}
}

// refusal is Validate's error for a call whose Phase is Refused: its text,
// and a bad argument for errors.Is, whatever Refused is.
type refusal struct{ error }

func (e refusal) Unwrap() error { return e.error }

func (e refusal) Is(target error) bool { return target == comm.ErrInvalidArgument }

// inPlaceBlock reports whether c is the in-place form of AllGather (send is
// block rank of recv) or ReduceScatter (recv is block rank of send), as NCCL
// defines them.
func inPlaceBlock(c comm.Call, rank int) bool {
	switch c.Kind {
	case comm.KindAllGather:
		n := c.Send.Len()
		return comm.SameMemory(c.Send, c.Recv.Slice(rank*n, n))
	case comm.KindReduceScatter:
		n := c.Recv.Len()
		return comm.SameMemory(c.Recv, c.Send.Slice(rank*n, n))
	}
	return false
}

func validateCounts(c comm.Call, size int, bad func(arg, format string, a ...any) error) error {
	for _, side := range []struct {
		name   string
		counts []int
		buf    comm.Buffer
	}{{"sendCounts", c.SendCounts, c.Send}, {"recvCounts", c.RecvCounts, c.Recv}} {
		if len(side.counts) != size {
			return bad(side.name, "has %d entries, want one per rank (%d)", len(side.counts), size)
		}
		total := 0
		for i, n := range side.counts {
			if n < 0 {
				return bad(fmt.Sprintf("%s[%d]", side.name, i), "is negative (%d)", n)
			}
			total += n
		}
		buf := "send"
		if side.name == "recvCounts" {
			buf = "recv"
		}
		if total != side.buf.Len() {
			return bad(buf, "has %d elements but %s add up to %d", side.buf.Len(), side.name, total)
		}
	}
	return nil
}

// RequireHost returns a *comm.ArgError when c uses device memory, for
// communicators that move host memory only.
func RequireHost(c comm.Call) error {
	for _, b := range []struct {
		name string
		buf  comm.Buffer
	}{{"send", c.Send}, {"recv", c.Recv}} {
		if !b.buf.IsZero() && !b.buf.OnHost() {
			return &comm.ArgError{Kind: c.Kind, Arg: b.name, Problem: fmt.Sprintf("is device memory (%v) but this communicator moves host memory only; use the nccl or hierarchical communicator", b.buf)}
		}
	}
	return nil
}

// ValidateHost is Validate, then RequireHost: the checks of a communicator
// that moves host memory.
func ValidateHost(ctx context.Context, c comm.Call, rank, size int) error {
	if err := Validate(ctx, c, rank, size); err != nil {
		return err
	}
	return RequireHost(c)
}
