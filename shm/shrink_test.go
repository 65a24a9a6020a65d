package shm_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/shm"
)

// Rank 2 of 4 closes while the others wait in a Barrier; they Shrink and
// meet in fresh shared memory as ranks 0, 1, 2 of three. With nothing
// failed, Shrink is a copy of all four.
func TestShrink(t *testing.T) {
	for _, tc := range []struct {
		name   string
		victim int
		want   []int
	}{{"rank 2 closes", 2, []int{0, 1, 3}}, {"nothing fails", -1, []int{0, 1, 2, 3}}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cs, err := shm.NewLocal(ctx, fmt.Sprintf("shrinktest-%d", time.Now().UnixNano()), 4, shm.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer shm.CloseAll(cs)
			errs := make([]error, len(cs))
			var wg sync.WaitGroup
			for r, c := range cs {
				wg.Go(func() {
					if r == tc.victim {
						time.Sleep(20 * time.Millisecond)
						errs[r] = c.Close()
						return
					}
					if err := c.Barrier(ctx); (err == nil) != (tc.victim < 0) || err != nil && !errors.Is(err, comm.ErrPeerFailed) {
						errs[r] = fmt.Errorf("Barrier: %v", err)
						return
					}
					s, err := c.Shrink(ctx)
					if err != nil {
						errs[r] = err
						return
					}
					defer s.Close()
					errs[r] = commtest.ShrunkRank(ctx, s, r, tc.want)
				})
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil && !(r == tc.victim && slices.Contains(tc.want, r)) {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}
