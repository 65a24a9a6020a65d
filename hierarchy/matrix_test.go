package hierarchy_test

import (
	"os"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/hierarchy"
)

// TestMismatchMatrix: one rank calls another kind of collective than the
// others, for every ordered pair of kinds (commtest.MismatchMatrixRank),
// on the defaults (the routes the cost model picks). The kinds take
// different routes through the parts, so no part need see both calls:
// every rank must still get a *comm.MismatchError naming the users'
// calls and collective #2, within 2 s. Each pair runs once, the odd rank
// and the count going round; by default on 2 x 2 with shared memory in
// the nodes and on 2 + 3 with nexar, with HIERCOMM_TEST_FULL=1 (make
// faults) on every layout with both, and with HIERCOMM_TEST_MATRIX=full
// every cell of the matrix (every count, every rank the odd one).
func TestMismatchMatrix(t *testing.T) {
	full := os.Getenv("HIERCOMM_TEST_FULL") != ""
	type run struct {
		l     layout
		intra string
	}
	runs := []run{{layouts[0], "shm"}, {layouts[5], "nexar"}}
	if full {
		runs = nil
		for _, l := range layouts {
			runs = append(runs, run{l, "nexar"}, run{l, "shm"})
		}
	}
	for _, r := range runs {
		t.Run(r.l.name+"/"+r.intra, func(t *testing.T) {
			opt := commtest.Options{Timeout: 10 * time.Second, FullMatrix: os.Getenv("HIERCOMM_TEST_MATRIX") == "full"}
			if raceEnabled {
				opt.MismatchWithin = 5 * time.Second // the race detector slows every step
			}
			commtest.RunMismatchMatrix(t, build(t, r.l, r.intra, hierarchy.Config{}), opt)
		})
	}
}
