//go:build linux

package shm

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
)

// everyRank runs fn(r) for r in [0, n), each on its own goroutine (as
// one process per rank would), and returns their errors.
func everyRank(n int, fn func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = fn(r) })
	}
	wg.Wait()
	return errs
}

// grownConfig is rank r's Config of a grown communicator of size ranks
// in namespace ns.
func grownConfig(ns string, r, size int, connect time.Duration) Config {
	return Config{Namespace: ns, Rank: r, Size: size, ConnectTimeout: connect}
}

// stillWorks runs a few exact collectives with rank-distinct data on
// every rank of cs.
func stillWorks(t *testing.T, cs []*Comm) {
	t.Helper()
	commtest.Run(t, asComms(cs), commtest.Options{Counts: []int{1, 7}, DTypes: []comm.DType{comm.F32, comm.I64}, Timeout: time.Minute})
}

// P members take k newcomers in; the members keep their ranks, the
// newcomers follow, and the grown communicator passes the conformance
// suite; it leaves no segment behind.
func TestGrowConformance(t *testing.T) {
	for _, l := range []struct{ members, newcomers int }{{2, 1}, {3, 2}, {1, 1}} {
		t.Run(fmt.Sprintf("%d+%d", l.members, l.newcomers), func(t *testing.T) {
			cs := localWorld(t, l.members, Config{})
			ns, size := testNamespace(), l.members+l.newcomers
			defer noSegments(t, ns)
			o := commtest.Options{Counts: []int{0, 1, 7, 4099}, Timeout: time.Minute}
			if raceDetector {
				o.Counts = []int{1, 7, 1000}
			}
			commtest.RunGrow(t, asComms(cs), l.newcomers, func(ctx context.Context, r int) (comm.Communicator, error) {
				cfg := grownConfig(ns, r, size, 30*time.Second)
				if r < len(cs) {
					return cs[r].Grow(ctx, cfg)
				}
				return Join(ctx, cfg)
			}, o)
		})
	}
}

// A Grow to the size there is gives every member its communicator back,
// which works on.
func TestGrowWithNobody(t *testing.T) {
	cs := localWorld(t, 3, Config{})
	ns := testNamespace()
	for r, err := range everyRank(3, func(r int) error {
		g, err := cs[r].Grow(context.Background(), grownConfig(ns, r, 3, 30*time.Second))
		if err == nil && g != cs[r] {
			return fmt.Errorf("Grow with nobody gave %p, want the communicator itself (%p)", g, cs[r])
		}
		return err
	}) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	stillWorks(t, cs)
	noSegments(t, ns)
}

// A failed Grow fails on every member, each error naming what failed,
// leaves the members' communicator usable and no segment behind.
func TestGrowFailure(t *testing.T) {
	const members, size = 2, 4
	for _, tc := range []struct {
		name string
		who  int               // the rank whose Config edit changes
		edit func(cfg *Config) // nil: none
		come []int             // the newcomers that call Join (the others never come)
		// dies: the newcomer that attaches with New, and closes (as a
		// process that dies), instead of Join; 0: none.
		dies         int
		want         string // in every member's error
		wantNewcomer string // in the error of every newcomer that came
	}{{
		name: "a newcomer never comes", come: []int{2},
		want: "ranks [3]", wantNewcomer: "ranks [3]",
	}, {
		name: "a newcomer dies", come: []int{2}, dies: 3,
		want: "building the grown communicator",
	}, {
		name: "a smaller size", who: 0,
		edit: func(cfg *Config) { cfg.Size = 1 },
		want: "Size is 1, smaller than the 2 of the communicator to grow",
	}, {
		name: "a rank that moved", who: 1,
		edit: func(cfg *Config) { cfg.Rank = 2 },
		want: "Rank is 2, not this member's rank 1",
	}, {
		name: "the live namespace", who: 1,
		edit: func(cfg *Config) { cfg.Namespace = "live" },
		want: "is the communicator's to grow: give the grown one a fresh namespace",
	}, {
		name: "an invalid Config", who: 1,
		edit: func(cfg *Config) { cfg.SlotBytes = 100 },
		want: "SlotBytes 100 is below the minimum",
	}, {
		name: "a member's settings differ", who: 0,
		edit: func(cfg *Config) { cfg.Size, cfg.StepBytes = 5, 4096 },
		want: "the ranks gave different Size, StepBytes",
	}, {
		name: "a newcomer's settings differ", who: 3, come: []int{2, 3},
		edit: func(cfg *Config) { cfg.StepBytes = 4096 },
		want: "the ranks gave different StepBytes", wantNewcomer: "StepBytes",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			live := testNamespace()
			cs := localWorldIn(t, live, members, Config{})
			ns := testNamespace()
			commtest.RunGrowFailure(t, asComms(cs), size-members, func(ctx context.Context, r int) (comm.Communicator, error) {
				cfg := grownConfig(ns, r, size, time.Second)
				if tc.edit != nil && r == tc.who {
					tc.edit(&cfg)
					if cfg.Namespace == "live" {
						cfg.Namespace = live
					}
				}
				switch {
				case r < members:
					return cs[r].Grow(ctx, cfg)
				case r == tc.dies:
					if g, err := New(ctx, cfg); err == nil {
						g.Close()
					}
					return nil, nil
				case slices.Contains(tc.come, r):
					return Join(ctx, cfg)
				}
				return nil, nil
			}, tc.want, tc.wantNewcomer, commtest.Options{Timeout: time.Minute})
			noSegments(t, ns)
		})
	}
}

// A member that dies before it grows (the kill hook: no more posts or
// heartbeats, and it never calls Grow): every other member's Grow ends
// with an error that names it, within FailureTimeout of the kill, and the
// newcomer's Join ends too, at its ConnectTimeout at the latest.
func TestGrowMemberGone(t *testing.T) {
	const members, size, gone = 3, 4, 2
	const failure, connect = 500 * time.Millisecond, 2 * time.Second
	cs := localWorld(t, members, Config{FailureTimeout: failure})
	ns := testNamespace()
	defer noSegments(t, ns)
	kill := func(c comm.Communicator) error { c.(*Comm).kill(); return nil }
	commtest.RunGrowMemberGone(t, asComms(cs), size-members, gone, kill, func(ctx context.Context, r int) (comm.Communicator, error) {
		cfg := grownConfig(ns, r, size, connect)
		if r < members {
			return cs[r].Grow(ctx, cfg)
		}
		return Join(ctx, cfg)
	}, 3*connect)
}
