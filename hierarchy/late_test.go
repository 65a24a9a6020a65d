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
// every one of their errors names it by global rank and place — also the
// ranks that waited on it through two or three parts (rank 1 waits in
// the intra-node part for rank 0, which waits on the rail for rank 2,
// which waits in its node for rank 3): the hierarchy's deadline asks
// every rank where it is (comm.Control's census). No error names the rank
// returning it (a part's own numbering passed off as a global rank used
// to), and OpError.Peer is the straggler.
func TestDeadlineNamesTheRanksThatHadNotStarted(t *testing.T) {
	for _, intra := range []string{"nexar", "shm"} {
		t.Run(intra, func(t *testing.T) {
			l := layout{name: "2x2", perNode: []int{2, 2}}
			tp := topo(t, l)
			cs := build(t, l, intra, hierarchy.Config{})
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
			for r, err := range errs {
				if r == straggler {
					continue
				}
				if !errors.Is(err, comm.ErrTimeout) {
					t.Errorf("rank %d: %v, want a timeout", r, err)
					continue
				}
				msg := err.Error()
				named := false
				for _, m := range hint.FindAllStringSubmatch(msg, -1) {
					g, _ := strconv.Atoi(m[1])
					if g == r {
						t.Errorf("rank %d: %q says this rank itself had not started", r, msg)
					}
					if want := fmt.Sprintf("%d %d", tp.NodeOf(g), tp.LocalRank(g)); m[2]+" "+m[3] != want {
						t.Errorf("rank %d: %q places rank %d at node %s, local %s; it is at %s", r, msg, g, m[2], m[3], want)
					}
					named = named || g == straggler
				}
				if !named {
					t.Errorf("rank %d: %q does not name the straggler, rank %d", r, msg, straggler)
				}
				var oe *comm.OpError
				if errors.As(err, &oe) && oe.Peer != straggler {
					t.Errorf("rank %d: %v: OpError.Peer %d, want the straggler, %d", r, err, oe.Peer, straggler)
				}
				t.Logf("rank %d: %v", r, err)
			}
		})
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
