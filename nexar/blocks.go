package nexar

import (
	"fmt"

	"github.com/hiercomm/hiercomm/comm"

	"golang.org/x/sync/errgroup"
)

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

// segBytes is the pipelining unit for elements of es bytes: SegmentBytes
// rounded down to whole elements, at least one.
func (o *op) segBytes(es int) int {
	return max(es, o.c.opt.SegmentBytes/es*es)
}

// sizeError is a frame whose length differs from what the schedule expects:
// the two ranks disagree on the call in a way the Signature did not show.
func (o *op) sizeError(peer, got, want int) error {
	return &comm.MismatchError{Peer: peer, Seq: o.seq, Local: o.sig,
		Reported: fmt.Sprintf("rank %d sent a frame of %d bytes where this rank's call expects %d", peer, got, want)}
}
