package hierarchy_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/topology"
)

// A rank that closes its hierarchy while the others are inside an
// AllReduce: every survivor's error must blame that rank by its global
// rank — first in the text, in OpError.Peer and in OpError.Culprit —
// whichever part the news came through (its node's intra part, or a rail
// from another node's rank), and name no other rank as failed. Its
// node-mates see the close in the intra part; the other node's ranks hear
// of it from a rank that aborted its rail, which is where a live rank
// used to be blamed (and the intra part's local rank passed for a global
// one).
func TestEverySurvivorBlamesTheRankThatFailed(t *testing.T) {
	for _, tc := range []struct {
		layout layout
		intra  string
		victim int
		count  int
	}{
		{layout{name: "2x4", perNode: []int{4, 4}}, "shm", 6, 1 << 18},
		{layout{name: "2x4", perNode: []int{4, 4}}, "nexar", 6, 1 << 18},
		{layout{name: "2x4", perNode: []int{4, 4}}, "shm", 1, 1 << 18},
		{layout{name: "2x4", perNode: []int{4, 4}}, "nexar", 1, 17},
		{layout{name: "2x2", perNode: []int{2, 2}}, "shm", 3, 17},
	} {
		t.Run(fmt.Sprintf("%s/%s/rank%d/%d", tc.layout.name, tc.intra, tc.victim, tc.count), func(t *testing.T) {
			cs := build(t, tc.layout, tc.intra, hierarchy.Config{})
			tp := topo(t, tc.layout)
			errs := each(cs, func(r int, c comm.Communicator) error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if r == tc.victim {
					time.Sleep(50 * time.Millisecond) // the others are waiting for it
					return c.Close()
				}
				x := make([]float32, tc.count)
				return c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum)
			})
			prefix := failedPrefix(tp, tc.victim)
			for r, err := range errs {
				if r == tc.victim {
					if err != nil {
						t.Errorf("rank %d (the victim): Close: %v", r, err)
					}
					continue
				}
				if err := checkBlame(err, tc.victim, prefix); err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			t.Logf("rank 0: %v", errs[0])
		})
	}
}

// failed finds the ranks an error's text says failed.
var failed = regexp.MustCompile(`rank (\d+)[^;]* failed`)

// failedPrefix is how an error that blames rank of tp begins.
func failedPrefix(tp *topology.Topology, rank int) string {
	return fmt.Sprintf("rank %d (node %d, local %d) failed: ", rank, tp.NodeOf(rank), tp.LocalRank(rank))
}

// checkBlame checks that err is a peer failure that blames victim
// (global) and no other rank, and begins with prefix.
func checkBlame(err error, victim int, prefix string) error {
	if !errors.Is(err, comm.ErrPeerFailed) {
		return fmt.Errorf("%v: want ErrPeerFailed", err)
	}
	var oe *comm.OpError
	if !errors.As(err, &oe) {
		return fmt.Errorf("%v: not an *comm.OpError", err)
	}
	if got, ok := oe.Culprit(); !ok || got != victim {
		return fmt.Errorf("%v: Culprit() = %d, %v, want %d", err, got, ok, victim)
	}
	if oe.Peer != victim {
		return fmt.Errorf("%v: OpError.Peer = %d, want the culprit %d", err, oe.Peer, victim)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		return fmt.Errorf("%q: want the cause first: %q…", msg, prefix)
	}
	for _, m := range failed.FindAllStringSubmatch(msg, -1) {
		if m[1] != fmt.Sprint(victim) {
			return fmt.Errorf("%q: blames rank %s too", msg, m[1])
		}
	}
	if strings.Contains(msg, "\n") {
		return fmt.Errorf("%q: more than one line", msg)
	}
	return nil
}

// A rank declared dead by an outside detector (the cluster layer calls
// PeerFailed on one survivor first, as memberlist's gossip would): every
// survivor, also those that only hear of it from that one, blames the dead
// rank by its global rank, and later calls keep blaming it.
func TestOutsideDetectorNewsBlamesTheDeadRank(t *testing.T) {
	for _, intra := range []string{"shm", "nexar"} {
		t.Run(intra, func(t *testing.T) {
			l := layout{name: "2x4", perNode: []int{4, 4}}
			cs := build(t, l, intra, hierarchy.Config{})
			tp := topo(t, l)
			const dead = 5
			cause := errors.New("declared dead by the failure detector")
			errs := each(cs, func(r int, c comm.Communicator) error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if r == dead {
					return nil // silent: only the detector can tell
				}
				if r == 2 {
					time.Sleep(50 * time.Millisecond)
					c.PeerFailed(dead, cause)
				}
				x := make([]float32, 1<<16)
				if err := c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); err == nil {
					return errors.New("AllReduce without the dead rank returned nil")
				} else if err := checkBlame(err, dead, failedPrefix(tp, dead)); err != nil {
					return err
				}
				err := c.Barrier(ctx)
				var oe *comm.OpError
				if !errors.Is(err, comm.ErrAborted) || !errors.As(err, &oe) {
					return fmt.Errorf("Barrier after the failure: %v, want ErrAborted", err)
				}
				if got, ok := oe.Culprit(); !ok || got != dead {
					return fmt.Errorf("Barrier after the failure: %v: Culprit() = %d, %v, want %d", err, got, ok, dead)
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// The same for a Split child of the hierarchy (itself hierarchical: its
// own world, intra and rail parts): a rank that closes its child while
// the others are in an AllReduce on it is blamed by its rank in the child,
// and the parent stays usable.
func TestChildSurvivorsBlameTheRankThatClosed(t *testing.T) {
	for _, intra := range []string{"shm", "nexar"} {
		t.Run(intra, func(t *testing.T) {
			l := layout{name: "2x4", perNode: []int{4, 4}}
			cs := build(t, l, intra, hierarchy.Config{})
			children := make([]comm.Communicator, len(cs))
			// Even ranks: a 2×2 child, ranks 0 2 4 6 → 0 1 2 3.
			errs := each(cs, func(r int, c comm.Communicator) error {
				color := comm.NoColor
				if r%2 == 0 {
					color = 0
				}
				var err error
				children[r], err = c.Split(context.Background(), color, r)
				return err
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			const closer = 3 // child rank 3: parent rank 6, node 1, local 1 in the child
			errs = each(cs, func(r int, c comm.Communicator) error {
				ch := children[r]
				if ch == nil {
					return nil
				}
				if ch.Rank() == closer {
					time.Sleep(50 * time.Millisecond)
					return ch.Close()
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				x := make([]float32, 1<<16)
				return checkBlame(ch.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum), closer,
					"rank 3 (node 1, local 1) failed: ")
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			errs = each(cs, func(r int, c comm.Communicator) error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				return c.Barrier(ctx)
			})
			if err := errors.Join(errs...); err != nil {
				t.Errorf("the parent after the child's failure: %v", err)
			}
			for _, ch := range children {
				if ch != nil {
					ch.Close()
				}
			}
		})
	}
}
