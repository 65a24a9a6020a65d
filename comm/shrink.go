package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// ErrCannotShrink is wrapped by the error of Communicator.Shrink for a
// communicator that cannot shrink.
var ErrCannotShrink = errors.New("communicator cannot shrink")

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
