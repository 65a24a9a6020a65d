package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Shrinker is a Communicator that can give its survivors a new
// communicator without the ranks that failed, as ULFM's MPI_Comm_shrink
// and NCCL's ncclCommShrink do.
//
// Shrink is called by every surviving rank (ranks that this one knows
// failed need not, and cannot). The survivors agree on the set of failed
// ranks — also when they learned of different failures, and when a
// further rank fails during the agreement — and each gets a new
// communicator of the others, ranked in the order of their ranks here.
// Every survivor that returns without error has the same members; the
// new communicator's collectives are exact. With no rank failed, the
// result is a copy of the whole group (a new communicator with its own
// sequence space), as MPI_Comm_shrink gives; this communicator is then
// left as it was.
//
// Shrink ends in bounded time: a peer that has not joined the agreement
// by ctx's deadline (or, without one, by the communicator's own timeout
// for a collective) makes it fail on every rank with an error naming it;
// it is not taken for failed, since it may be alive and merely late. A
// failure during the agreement that not every survivor saw in time may
// leave that rank in the new communicator: its first collective then
// fails with the failure, and a second Shrink removes the rank. So may a
// rank whose ctx ends after it joined the agreement: its Shrink fails
// while the others may have decided with it; it should exit, which the
// others' next collective reports.
//
// This communicator stays aborted by the failure; Close it after Shrink
// (the new communicator does not depend on it staying open). Communicators
// Split from this one are not shrunk: Split the new one again.
type Shrinker interface {
	Shrink(ctx context.Context) (Communicator, error)
}

// ErrCannotShrink is wrapped by the error of Shrink for a communicator
// that cannot shrink.
var ErrCannotShrink = errors.New("communicator cannot shrink")

// Shrink shrinks c where c is a Shrinker (see Shrinker), and returns an
// error wrapping ErrCannotShrink, naming c's type, where it is not.
func Shrink(ctx context.Context, c Communicator) (Communicator, error) {
	if s, ok := c.(Shrinker); ok {
		return s.Shrink(ctx)
	}
	return nil, fmt.Errorf("%T (rank %d of %d) has no Shrink: %w; rebuild the communicator from the survivors instead", c, c.Rank(), c.Size(), ErrCannotShrink)
}

// Survivors is what a composed communicator needs after its world part
// shrank: the ranks that each rank of the shrunk communicator had before
// (old[i] is new rank i's), found with an AllGather on shrunk, where this
// rank was rank oldRank. They come out in increasing order, since Shrink
// keeps the order; anything else is an error.
func Survivors(ctx context.Context, shrunk Communicator, oldRank int) ([]int, error) {
	mine := []int64{int64(oldRank)}
	all := make([]int64, shrunk.Size())
	if err := shrunk.AllGather(ctx, Host(mine), Host(all)); err != nil {
		return nil, fmt.Errorf("gathering the survivors' former ranks: %w", err)
	}
	old := make([]int, len(all))
	for i, r := range all {
		old[i] = int(r)
	}
	if !slices.IsSorted(old) || len(slices.Compact(slices.Clone(old))) != len(old) {
		return nil, fmt.Errorf("the shrunk communicator's ranks had ranks %v before, not in increasing order", old)
	}
	return old, nil
}
