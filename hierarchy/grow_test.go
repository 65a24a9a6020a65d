package hierarchy_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/nexar"
	"github.com/hiercomm/hiercomm/nexar/transport/netmesh"
	"github.com/hiercomm/hiercomm/topology"
)

// grownWorld is what every process of a hierarchy grown from old by
// newcomers (on the hosts named) passes: the grown topology, and each
// process's constructor of its end of the grown world part (nexar over
// TCP on 127.0.0.1).
func grownWorld(t *testing.T, old *topology.Topology, hosts []string, connect time.Duration) []hierarchy.Grown {
	t.Helper()
	var ms []topology.Member
	for i, h := range hosts {
		ms = append(ms, topology.Member{Host: h, Device: -1, Name: fmt.Sprintf("newcomer-%d", i)})
	}
	tp, err := old.Grown(ms)
	if err != nil {
		t.Fatal(err)
	}
	nets, err := netmesh.LocalConfigs("tcp", tp.Size(), nexar.NetConfig{JobKey: []byte("hierarchy-grow-test-key-32-bytes"), JobID: "hierarchy-grow", ConnectTimeout: connect})
	if err != nil {
		t.Fatal(err)
	}
	grown := make([]hierarchy.Grown, tp.Size())
	for r := range grown {
		t.Cleanup(func() { nets[r].Listener.Close() }) // a process's that never came; else closed already
		cfg := nexar.Config{Net: nets[r], Network: "tcp", Options: nexar.Options{Timeout: time.Minute}}
		grown[r] = hierarchy.Grown{Topology: tp, ConnectTimeout: connect, World: func(ctx context.Context) (comm.Communicator, error) {
			return nexar.Connect(ctx, cfg)
		}}
	}
	return grown
}

// A hierarchy takes newcomers in, on a node of the job and on a new one:
// every process is at the rank the rule gives it (the members keep
// theirs, the newcomers follow, by host), and the grown hierarchy, with
// shared memory in the nodes again where Config.NewIntra makes it,
// passes the conformance suite.
func TestGrowHierarchy(t *testing.T) {
	for _, tc := range []struct {
		layout layout
		intra  string
		hosts  []string // the newcomers'
	}{
		{layout{name: "2x2", perNode: []int{2, 2}}, "shm", []string{"node-1", "node-2"}},
		{layout{name: "2x2", perNode: []int{2, 2}}, "nexar", []string{"node-0"}},
		{layout{name: "2+1", perNode: []int{2, 1}}, "shm", []string{"node-1", "node-2", "node-2"}},
	} {
		t.Run(fmt.Sprintf("%s/%s/%v", tc.layout.name, tc.intra, tc.hosts), func(t *testing.T) {
			var cfg hierarchy.Config
			if tc.intra == "shm" {
				cfg.NewIntra = shmIntra
			}
			cs := build(t, tc.layout, tc.intra, cfg)
			grown := grownWorld(t, topo(t, tc.layout), tc.hosts, 30*time.Second)
			o := commtest.Options{Counts: []int{0, 1, 7, 4099}, Timeout: time.Minute}
			if raceEnabled {
				o.Counts = []int{1, 7, 1000}
			}
			commtest.RunGrow(t, cs, len(tc.hosts), func(ctx context.Context, r int) (comm.Communicator, error) {
				if r < len(cs) {
					return cs[r].(*hierarchy.Comm).Grow(ctx, grown[r])
				}
				return hierarchy.Join(ctx, grown[r], cfg)
			}, o)
		})
	}
}

// A failed Grow fails on every member, naming what failed, and leaves
// the hierarchy usable.
func TestGrowHierarchyFailure(t *testing.T) {
	l := layout{name: "2x2", perNode: []int{2, 2}}
	// What a member is given instead of the others' grown topology.
	fewer := topo(t, layout{perNode: []int{1, 1}})
	moved, err := topo(t, layout{perNode: []int{1, 3}}).Grown([]topology.Member{{Host: "node-1", Device: -1}, {Host: "node-2", Device: -1}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := topo(t, l).Grown([]topology.Member{{Host: "node-1", Device: -1}, {Host: "node-3", Device: -1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		come         bool // the newcomer on node-1 comes; the one on node-2 never does
		edit         func(r int, g *hierarchy.Grown)
		want         string // in every member's error
		wantNewcomer string
	}{{
		name: "a newcomer never comes", come: true,
		want: "no connection from rank(s) [5]", wantNewcomer: "no connection from rank(s) [5]",
	}, {
		name: "fewer ranks than now",
		edit: func(r int, g *hierarchy.Grown) {
			if r == 2 {
				g.Topology = fewer
			}
		},
		want: "the grown Topology has 2 ranks, fewer than the 4 of the hierarchy to grow",
	}, {
		name: "a member that moved",
		edit: func(r int, g *hierarchy.Grown) {
			if r == 1 {
				g.Topology = moved
			}
		},
		want: `the grown Topology puts rank 1 on host "node-1", but it is on "node-0"`,
	}, {
		name: "topologies that differ",
		edit: func(r int, g *hierarchy.Grown) {
			if r == 3 {
				g.Topology = other
			}
		},
		want: "the ranks gave different Grown.Topology",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cs := build(t, l, "shm", hierarchy.Config{NewIntra: shmIntra})
			grown := grownWorld(t, topo(t, l), []string{"node-1", "node-2"}, time.Second)
			commtest.RunGrowFailure(t, cs, 2, func(ctx context.Context, r int) (comm.Communicator, error) {
				g := grown[r]
				if tc.edit != nil {
					tc.edit(r, &g)
				}
				switch {
				case r < len(cs):
					return cs[r].(*hierarchy.Comm).Grow(ctx, g)
				case r == 4 && tc.come:
					return hierarchy.Join(ctx, g, hierarchy.Config{NewIntra: shmIntra})
				}
				return nil, nil
			}, tc.want, tc.wantNewcomer, commtest.Options{Timeout: time.Minute})
		})
	}
}

// A Grow to the ranks there are gives every member its hierarchy back,
// which works on.
func TestGrowHierarchyWithNobody(t *testing.T) {
	l := layout{name: "2x2", perNode: []int{2, 2}}
	cs := build(t, l, "shm", hierarchy.Config{NewIntra: shmIntra})
	tp := topo(t, l)
	for r, err := range each(cs, func(r int, c comm.Communicator) error {
		g, err := c.(*hierarchy.Comm).Grow(t.Context(), hierarchy.Grown{Topology: tp, World: func(context.Context) (comm.Communicator, error) {
			return nil, errors.New("Grow with nobody made a world part")
		}})
		if err == nil && g != c {
			return fmt.Errorf("Grow with nobody gave %p, want the hierarchy itself (%p)", g, c)
		}
		return err
	}) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	commtest.Run(t, cs, commtest.Options{Counts: []int{1, 7}, DTypes: []comm.DType{comm.F32, comm.I64}, Timeout: time.Minute})
}

// A member that is gone before it grows (its hierarchy closed, as its
// process's would be, and it never calls Grow): every other member's Grow
// ends with an error that names it, and the newcomer's Join ends too, at
// its ConnectTimeout at the latest.
func TestGrowHierarchyMemberGone(t *testing.T) {
	l := layout{name: "2x2", perNode: []int{2, 2}}
	const gone, connect = 3, 2 * time.Second
	cs := build(t, l, "shm", hierarchy.Config{NewIntra: shmIntra})
	grown := grownWorld(t, topo(t, l), []string{"node-1"}, connect)
	commtest.RunGrowMemberGone(t, cs, 1, gone, comm.Communicator.Close, func(ctx context.Context, r int) (comm.Communicator, error) {
		if r < len(cs) {
			return cs[r].(*hierarchy.Comm).Grow(ctx, grown[r])
		}
		return hierarchy.Join(ctx, grown[r], hierarchy.Config{NewIntra: shmIntra})
	}, 3*connect)
}
