package hierarchy_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/hierarchy"
)

// A rank that never starts a collective: the others' deadlines pass, and
// their errors name the ranks they were waiting for by global rank (a
// part's own numbering passed off as a global rank used to name the
// waiting rank itself), never the rank returning the error; the
// straggler's node-mate, which waited on it directly, names it.
func TestDeadlineNamesTheRanksThatHadNotStarted(t *testing.T) {
	l := layout{name: "2x2", perNode: []int{2, 2}}
	tp := topo(t, l)
	cs := build(t, l, "nexar", hierarchy.Config{})
	const straggler = 3
	errs := each(cs, func(r int, c comm.Communicator) error {
		if r == straggler {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		x := make([]float32, 17)
		return c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum)
	})
	hint := regexp.MustCompile(`rank (\d+) \(node (\d+), local (\d+)\) had not started`)
	named := false
	for r, err := range errs {
		if r == straggler {
			continue
		}
		if !errors.Is(err, comm.ErrTimeout) {
			t.Errorf("rank %d: %v, want a timeout", r, err)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, "had not started") && !hint.MatchString(msg) {
			t.Errorf("rank %d: %q names a rank that had not started without its place (a part's own rank?)", r, msg)
		}
		for _, m := range hint.FindAllStringSubmatch(msg, -1) {
			g, _ := strconv.Atoi(m[1])
			if g == r {
				t.Errorf("rank %d: %q says this rank itself had not started", r, msg)
			}
			if want := fmt.Sprintf("%d %d", tp.NodeOf(g), tp.LocalRank(g)); m[2]+" "+m[3] != want {
				t.Errorf("rank %d: %q places rank %d at node %s, local %s; it is at %s", r, msg, g, m[2], m[3], want)
			}
			if g == straggler {
				named = true
			}
		}
		var late *comm.LateError
		if errors.As(err, &late) {
			var oe *comm.OpError
			if errors.As(err, &oe) && oe.Peer != late.Ranks[0] {
				t.Errorf("rank %d: %v: OpError.Peer %d, want the rank waited for, %d", r, err, oe.Peer, late.Ranks[0])
			}
		}
		t.Logf("rank %d: %v", r, err)
	}
	if !named {
		t.Errorf("no error names the straggler, rank %d", straggler)
	}
}

// A rank whose context is canceled: its node-mate, told through the intra
// part, names it by its global rank (the part's own rank for it is 1),
// and no part calls itself "world".
func TestCancelNamesTheGlobalRank(t *testing.T) {
	for _, intra := range []string{"shm", "nexar"} {
		t.Run(intra, func(t *testing.T) {
			cs := build(t, layout{name: "2x2", perNode: []int{2, 2}}, intra, hierarchy.Config{})
			errs := each(cs, func(r int, c comm.Communicator) error {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if r == 3 {
					var stop context.CancelFunc
					ctx, stop = context.WithCancel(ctx)
					stop()
				}
				x := make([]float32, 17)
				return c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum)
			})
			msg := fmt.Sprint(errs[2])
			if !errors.Is(errs[2], comm.ErrCanceled) || !strings.Contains(msg, "rank 3 ended the collective") {
				t.Errorf("rank 2: %q, want a cancel that names rank 3", msg)
			}
			for r, err := range errs {
				if err != nil && strings.Contains(err.Error(), "on world") {
					t.Errorf("rank %d: %q names a part world", r, err)
				}
			}
		})
	}
}
