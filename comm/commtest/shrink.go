package commtest

import (
	"context"
	"fmt"
	"slices"

	"github.com/hiercomm/hiercomm/comm"
)

// ShrunkRank is what every survivor of a test that shrinks a communicator
// checks on the result s (comm.Communicator's Shrink), where this rank was oldRank and
// want are the former ranks of the survivors: its rank and size, that
// comm.Survivors finds exactly want (so every rank's new rank is its
// place in want), and the collectives of RunRank with rank-distinct data
// at a few small counts, on f32 and i64; then a Barrier, so that each
// rank may close s when it returns.
func ShrunkRank(ctx context.Context, s comm.Communicator, oldRank int, want []int) error {
	if s.Size() != len(want) || s.Rank() != slices.Index(want, oldRank) {
		return fmt.Errorf("shrunk to rank %d of %d, want rank %d of %d (survivors %v)", s.Rank(), s.Size(), slices.Index(want, oldRank), len(want), want)
	}
	got, err := comm.Survivors(ctx, s, oldRank)
	if err != nil {
		return err
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("the shrunk communicator holds former ranks %v, want %v", got, want)
	}
	if err := RunRank(ctx, s, Options{Counts: []int{1, 7}, DTypes: []comm.DType{comm.F32, comm.I64}}); err != nil {
		return err
	}
	// Every rank is done with every case before any closes s (a closed
	// peer may fail a Recv whose message it sent but the receiver has not
	// taken yet).
	return s.Barrier(ctx)
}
