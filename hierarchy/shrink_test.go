package hierarchy_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/hierarchy"
)

// Ranks close their hierarchy while the others are inside an AllReduce;
// every survivor gets the failure, Shrinks, and gets the same members,
// renumbered in order, on a recomputed topology: a hierarchy again where
// several nodes keep several ranks (heterogeneous after the loss), the
// flat world where one node is left. Its collectives are exact. With
// nothing failed, Shrink is a copy of the whole group.
func TestShrinkHierarchy(t *testing.T) {
	for _, tc := range []struct {
		layout  layout
		intra   string
		victims []int
		flat    bool // the shrunk communicator is the flat world
	}{
		{layout{name: "2x2", perNode: []int{2, 2}}, "shm", []int{3}, false},
		{layout{name: "2x4", perNode: []int{4, 4}}, "nexar", []int{1, 6}, false},
		{layout{name: "2x2", perNode: []int{2, 2}}, "shm", []int{2, 3}, true},
		{layout{name: "2x2-cyclic", perNode: []int{2, 2}, cyclic: true}, "shm", []int{0}, false},
		{layout{name: "2x2", perNode: []int{2, 2}}, "shm", nil, false},
	} {
		t.Run(fmt.Sprintf("%s/%s/%v", tc.layout.name, tc.intra, tc.victims), func(t *testing.T) {
			cs := build(t, tc.layout, tc.intra, hierarchy.Config{})
			var survivors []int
			for r := range cs {
				if !slices.Contains(tc.victims, r) {
					survivors = append(survivors, r)
				}
			}
			errs := each(cs, func(r int, c comm.Communicator) error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if slices.Contains(tc.victims, r) {
					time.Sleep(50 * time.Millisecond) // the others are waiting for it
					return c.Close()
				}
				x := make([]float32, 1<<12)
				err := c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum)
				if (err == nil) != (len(tc.victims) == 0) || err != nil && !errors.Is(err, comm.ErrPeerFailed) {
					return fmt.Errorf("AllReduce: %v", err)
				}
				s, err := comm.Shrink(ctx, c)
				if err != nil {
					return err
				}
				defer s.Close()
				if _, isH := s.(*hierarchy.Comm); isH == tc.flat {
					return fmt.Errorf("shrunk to a %T, want the flat world: %v", s, tc.flat)
				}
				return commtest.ShrunkRank(ctx, s, r, survivors)
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}
