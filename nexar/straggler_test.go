package nexar

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// A deadline several hops from the straggler names the straggler: in a
// Barrier of 4 with rank 3 missing, rank 2 waits on rank 0, which waits
// on rank 3; rank 0 answers rank 2's probe with rank 3, so rank 2's
// timeout says rank 3 had not started, not that rank 0 was slow.
func TestDeadlineNamesTheStragglerThroughAHop(t *testing.T) {
	cs := memWorld(t, 4, Options{Timeout: time.Minute, ProbeAfter: 50 * time.Millisecond})
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		wait := 20 * time.Second
		switch r {
		case 3:
			return nil // never calls
		case 2:
			wait = time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		return c.Barrier(ctx)
	})
	var late *comm.LateError
	var oe *comm.OpError
	if !errors.As(errs[2], &late) || !errors.As(errs[2], &oe) {
		t.Fatalf("rank 2: %v, want a *comm.LateError", errs[2])
	}
	if !slices.Equal(late.Ranks, []int{3}) || oe.Peer != 3 || !strings.Contains(errs[2].Error(), "rank 3 had not started collective #1") {
		t.Errorf("rank 2: %v: names ranks %v (peer %d), want rank 3 only", errs[2], late.Ranks, oe.Peer)
	}
	for _, r := range []int{0, 1} {
		if !errors.Is(errs[r], comm.ErrTimeout) {
			t.Errorf("rank %d: %v, want rank 2's deadline (ErrTimeout)", r, errs[r])
		}
	}
}
