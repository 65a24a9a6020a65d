package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
)

// NewGroup returns a communicator of the ranks of c listed in ranks, in
// that order: its rank i is c's rank ranks[i] (torch.distributed's
// new_group(ranks), MPI_Group_incl + MPI_Comm_create).
//
// It is a collective on c: every rank of c calls it, with the same list,
// members or not. A listed rank gets the new communicator; a rank not
// listed gets (nil, nil), as with Split's NoColor. The new communicator is
// a Split of c (color 0 for the members, key their index in the list), so
// it is what Split makes on c: its own sequence space, every operation;
// on a hierarchical c, a hierarchical communicator where the group spans
// several nodes with several ranks on some node. The caller closes it.
//
// The ranks first agree on the list with one AllReduce (the Min and Max of
// a hash of it), then Split. So:
//
//   - A list that is wrong on its own (empty, a rank out of [0, c.Size()),
//     a rank twice) is an error wrapping an *ArgError that names the
//     problem, on every rank that passed it; no Split is made.
//   - Ranks that pass different lists all get an error that wraps
//     ErrMismatch (errors.Is(err, ErrMismatch)), never different groups;
//     no Split is made, and c stays usable.
//   - A failure of the AllReduce or the Split (a deadline, a dead peer) is
//     returned as it is, wrapped.
func NewGroup(ctx context.Context, c Communicator, ranks []int) (Communicator, error) {
	listErr := checkGroup(ranks, c.Size())
	h := groupHash(ranks)
	agree := []uint64{h, ^h} // Max of ^h is ^(Min of h): one AllReduce gives both
	if err := c.AllReduce(ctx, Host(agree), Host(agree), Max); err != nil {
		return nil, fmt.Errorf("comm.NewGroup: agreeing on the list of ranks: %w", err)
	}
	if listErr != nil {
		return nil, fmt.Errorf("comm.NewGroup: %w", listErr)
	}
	if hi, lo := agree[0], ^agree[1]; hi != lo {
		return nil, fmt.Errorf("comm.NewGroup: rank %d: the ranks passed different lists (this rank passed %s); every rank of the communicator must pass the same list, members or not: %w",
			c.Rank(), formatRanks(ranks), ErrMismatch)
	}
	color, key := NoColor, 0
	for i, r := range ranks {
		if r == c.Rank() {
			color, key = 0, i
		}
	}
	g, err := c.Split(ctx, color, key)
	if err != nil {
		return nil, fmt.Errorf("comm.NewGroup: %w", err)
	}
	return g, nil
}

// checkGroup returns an *ArgError for a list of ranks that is wrong on its
// own on a communicator of size ranks.
func checkGroup(ranks []int, size int) error {
	bad := func(arg, format string, a ...any) error {
		return &ArgError{Kind: KindSplit, Arg: arg, Problem: fmt.Sprintf(format, a...)}
	}
	if len(ranks) == 0 {
		return bad("ranks", "the list is empty; a group needs at least one rank")
	}
	at := make(map[int]int, len(ranks))
	for i, r := range ranks {
		if r < 0 || r >= size {
			return bad(fmt.Sprintf("ranks[%d]", i), "rank %d is out of range [0, %d)", r, size)
		}
		if j, dup := at[r]; dup {
			return bad(fmt.Sprintf("ranks[%d]", i), "rank %d is listed twice (also ranks[%d])", r, j)
		}
		at[r] = i
	}
	return nil
}

// groupHash is a hash of the list, its length and order included.
func groupHash(ranks []int) uint64 {
	f := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(len(ranks)))
	f.Write(b[:])
	for _, r := range ranks {
		binary.LittleEndian.PutUint64(b[:], uint64(r))
		f.Write(b[:])
	}
	return f.Sum64()
}

// formatRanks prints a list of ranks, the middle of a long one elided.
func formatRanks(ranks []int) string {
	const most = 16
	if len(ranks) <= most {
		return fmt.Sprint(ranks)
	}
	return fmt.Sprintf("%v … %v (%d ranks)", ranks[:most/2], ranks[len(ranks)-most/2:], len(ranks))
}
