package hierarchy_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// TestNewGroup makes comm.NewGroup groups of a hierarchical world: one
// within a node (the intra part's split), one rank per node (the world
// part's), and one across nodes with several ranks on one (hierarchical
// again). Members get rank i = ranks[i]; the group's collectives are
// right; a list the ranks disagree on is an error on every rank that
// leaves the world usable.
func TestNewGroup(t *testing.T) {
	for _, tc := range []struct {
		l     layout
		intra string
	}{
		{layouts[0], "shm"},   // 2x2
		{layouts[1], "nexar"}, // 2x4
	} {
		t.Run(tc.l.name+"/"+tc.intra, func(t *testing.T) {
			cs := build(t, tc.l, tc.intra, small)
			P := len(cs)
			groups := [][]int{
				{1, 0},            // node 0
				{P - 1, 0},        // one rank per node
				{P - 1, P - 2, 1}, // node 1's last two and node 0's rank 1
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			errs := each(cs, func(_ int, c comm.Communicator) error { return groupsOn(ctx, c, groups) })
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// groupsOn is TestNewGroup on one rank.
func groupsOn(ctx context.Context, c comm.Communicator, groups [][]int) error {
	P := c.Size()
	for _, ranks := range groups {
		if err := checkGroup(ctx, c, ranks); err != nil {
			return fmt.Errorf("group %v: %w", ranks, err)
		}
	}
	list := []int{0, 1}
	if c.Rank() == P-1 {
		list = []int{1, 0}
	}
	if g, err := comm.NewGroup(ctx, c, list); g != nil || !errors.Is(err, comm.ErrMismatch) {
		return fmt.Errorf("lists that differ: got %v, %v; want no group and comm.ErrMismatch", g, err)
	}
	return checkGroup(ctx, c, []int{0, P - 1}) // the world still works
}

// checkGroup makes the group of ranks on c and checks it on this rank.
func checkGroup(ctx context.Context, c comm.Communicator, ranks []int) error {
	g, err := comm.NewGroup(ctx, c, ranks)
	if err != nil {
		return err
	}
	at := slices.Index(ranks, c.Rank())
	if at < 0 {
		if g != nil {
			return fmt.Errorf("rank %d is not listed but got a communicator", c.Rank())
		}
		return nil
	}
	defer g.Close()
	if g.Rank() != at || g.Size() != len(ranks) {
		return fmt.Errorf("got rank %d of %d, want %d of %d", g.Rank(), g.Size(), at, len(ranks))
	}
	got := make([]int64, g.Size())
	if err := g.AllGather(ctx, comm.Host([]int64{int64(c.Rank())}), comm.Host(got)); err != nil {
		return err
	}
	sum := []int64{int64(c.Rank())}
	if err := g.AllReduce(ctx, comm.Host(sum), comm.Host(sum), comm.Sum); err != nil {
		return err
	}
	var want int64
	for i, r := range ranks {
		want += int64(r)
		if got[i] != int64(r) {
			return fmt.Errorf("the group's ranks are the world's %v, want %v", got, ranks)
		}
	}
	if sum[0] != want {
		return fmt.Errorf("AllReduce on the group: %d, want %d", sum[0], want)
	}
	return g.Barrier(ctx)
}
