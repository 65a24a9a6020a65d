package nexar

import (
	"context"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"

	"golang.org/x/sync/errgroup"
)

// blockRange splits n items into parts nearly equal blocks and returns the
// offset and length of block i: the first n%parts blocks have one item more.
// Every schedule cuts buffers with it, so a count that parts does not
// divide is handled exactly, and every rank computes the same cut.
func blockRange(n, parts, i int) (off, length int) {
	base, rem := n/parts, n%parts
	off = i*base + min(i, rem)
	length = base
	if i < rem {
		length++
	}
	return off, length
}

// segmentsFor is how many pipelining segments a block of n elements is cut
// into when a segment holds at most seg elements (at least one segment, so
// empty blocks still send one empty frame and every rank counts the same).
func segmentsFor(n, seg int) int {
	return max(1, (n+seg-1)/seg)
}

// mod is the non-negative remainder.
func mod(a, n int) int { return ((a % n) + n) % n }

// parallel runs fs at once and waits for all of them; the first error ends
// the collective (so the others, blocked on its context, return too).
func (o *op) parallel(fs ...func() error) error {
	var g errgroup.Group
	for _, f := range fs {
		g.Go(func() error {
			err := f()
			if err != nil {
				o.fail(localFailure(err), true)
			}
			return err
		})
	}
	return g.Wait()
}

// The message helpers move a whole byte slice as one or more frames of at
// most segBytes, numbered tag<<16 | piece. Schedules whose steps are rounds
// (trees, doubling, scans) use them; the ring schedules number their own
// segments.
const maxPieces = 1 << 16

func msgStep(tag, piece int) uint32 { return uint32(tag)<<16 | uint32(piece) }

func (o *op) segBytes(es int) int {
	return max(es, o.c.opt.SegmentBytes/es*es)
}

// sendMsg sends data to peer as message tag.
func (o *op) sendMsg(peer, tag int, data []byte, es int) error {
	seg := o.segBytes(es)
	n := pieces(len(data), seg)
	if n > maxPieces {
		return fmt.Errorf("nexar: message of %d bytes needs %d pieces, more than %d (raise SegmentBytes)", len(data), n, maxPieces)
	}
	for i := range n {
		if err := o.send(peer, msgStep(tag, i), data[i*seg:min(len(data), (i+1)*seg)]); err != nil {
			return err
		}
	}
	return nil
}

// recvMsg receives message tag from peer into dst, which has exactly the
// message's length. With red set, each piece is combined into dst (as
// dst = dst op piece) instead of copied; with lowerFirst, as dst = piece op
// dst, for when the peer holds the lower ranks' part of the reduction.
func (o *op) recvMsg(peer, tag int, dst []byte, es int, red func(dst, src []byte), lowerFirst bool) error {
	seg := o.segBytes(es)
	n := pieces(len(dst), seg)
	for i := range n {
		p, err := o.recv(peer, msgStep(tag, i))
		if err != nil {
			return err
		}
		part := dst[i*seg : min(len(dst), (i+1)*seg)]
		if len(p) != len(part) {
			putBuf(p)
			return o.sizeError(peer, len(p), len(part))
		}
		switch {
		case red == nil:
			copy(part, p)
		case lowerFirst:
			red(p, part)
			copy(part, p)
		default:
			red(part, p)
		}
		putBuf(p)
	}
	return nil
}

// sizeError is a frame whose length differs from what the schedule expects:
// the two ranks disagree on the call in a way the Signature did not show.
func (o *op) sizeError(peer, got, want int) error {
	return &comm.MismatchError{Peer: peer, Seq: o.seq, Local: o.sig,
		Reported: fmt.Sprintf("rank %d sent a frame of %d bytes where this rank's call expects %d", peer, got, want)}
}

// waitCtx returns the cause once ctx is done.
func waitCtx(ctx context.Context) error {
	<-ctx.Done()
	return context.Cause(ctx)
}
