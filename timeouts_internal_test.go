package hiercomm

import (
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/nexar"
	"github.com/hiercomm/hiercomm/shm"
	"github.com/hiercomm/hiercomm/topology"
)

// planTopology is a topology of len(layout) nodes with layout[n] ranks on
// node n.
func planTopology(t *testing.T, layout ...int) *topology.Topology {
	t.Helper()
	var ms []topology.Member
	for n, g := range layout {
		for l := range g {
			ms = append(ms, topology.Member{Rank: len(ms), Host: "node-" + string(rune('a'+n)), Local: l, Device: -1})
		}
	}
	topo, err := topology.New(ms)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// Each timeout of the Options reaches the Plan, and the Plan's are what
// the tiers' configs carry: the network's as nexar.Config holds them
// (build's NetConfig and Options), a node's shared memory's as shm.Config
// does (connectIntraHost's copy of Options.Shm). Zero takes each medium's
// default: FailureTimeout 10 s on the network, 5 s on shared memory.
func TestTimeoutsReachThePlanAndTheTiers(t *testing.T) {
	const (
		op, fail, conn     = 10 * time.Minute, 10 * time.Second, time.Minute
		shmFail            = 5 * time.Second
		s1, s2, s3, m1, m2 = time.Second, 2 * time.Second, 3 * time.Second, time.Minute, 2 * time.Minute
	)
	for _, tc := range []struct {
		name          string
		layout        []int
		opt           Options
		network, node tier.Timeouts
		join          bool
	}{
		{"defaults, 2 × 2", []int{2, 2}, Options{},
			tier.Timeouts{Timeout: op, FailureTimeout: fail, ConnectTimeout: conn}, tier.Timeouts{Timeout: op, FailureTimeout: shmFail, ConnectTimeout: conn}, true},
		{"FailureTimeout for both", []int{2, 2}, Options{FailureTimeout: s3},
			tier.Timeouts{Timeout: op, FailureTimeout: s3, ConnectTimeout: conn}, tier.Timeouts{Timeout: op, FailureTimeout: s3, ConnectTimeout: conn}, true},
		{"Shm.FailureTimeout before it", []int{2, 2}, Options{FailureTimeout: s3, Shm: shm.Config{FailureTimeout: s1}},
			tier.Timeouts{Timeout: op, FailureTimeout: s3, ConnectTimeout: conn}, tier.Timeouts{Timeout: op, FailureTimeout: s1, ConnectTimeout: conn}, true},
		{"Timeout for both", []int{2, 2}, Options{Timeout: m1},
			tier.Timeouts{Timeout: m1, FailureTimeout: fail, ConnectTimeout: conn}, tier.Timeouts{Timeout: m1, FailureTimeout: shmFail, ConnectTimeout: conn}, true},
		{"Nexar.Timeout before it, for both", []int{2, 2}, Options{Timeout: m1, Nexar: nexar.Options{Timeout: m2}},
			tier.Timeouts{Timeout: m2, FailureTimeout: fail, ConnectTimeout: conn}, tier.Timeouts{Timeout: m2, FailureTimeout: shmFail, ConnectTimeout: conn}, true},
		{"Shm's own, ConnectTimeout for both", []int{2, 2}, Options{ConnectTimeout: s2, Shm: shm.Config{Timeout: m1}},
			tier.Timeouts{Timeout: op, FailureTimeout: fail, ConnectTimeout: s2}, tier.Timeouts{Timeout: m1, FailureTimeout: shmFail, ConnectTimeout: s2}, true},
		{"one node: shared memory alone", []int{4}, Options{FailureTimeout: s2},
			tier.Timeouts{}, tier.Timeouts{Timeout: op, FailureTimeout: s2, ConnectTimeout: conn}, true},
		{"one rank per node: the network alone", []int{1, 1, 1}, Options{},
			tier.Timeouts{Timeout: op, FailureTimeout: fail, ConnectTimeout: conn}, tier.Timeouts{}, true},
		{"a world of one: the operation's alone", []int{1}, Options{Timeout: m2, FailureTimeout: s1},
			tier.Timeouts{Timeout: m2}, tier.Timeouts{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPlan(launchenv.Launch{}, planTopology(t, tc.layout...), 0, -1, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			got := p.Timeouts
			if got.Network != tc.network || got.Node != tc.node {
				t.Errorf("Plan.Timeouts: network %+v, node %+v; want %+v, %+v", got.Network, got.Node, tc.network, tc.node)
			}
			if tc.join != (got.Join == launchenv.DefaultJoinTimeout && got.Detector > 0) {
				t.Errorf("Plan.Timeouts: join %v, detector %v; want the launch's and the detector's bound: %v", got.Join, got.Detector, tc.join)
			}
			// What build and connectIntraHost hand the tiers.
			opt := tc.opt.withDefaults(nil)
			net := opt.netConfig(nexar.NetConfig{})
			if tc.network.FailureTimeout != 0 {
				tiers := tier.Timeouts{Timeout: opt.Nexar.Timeout, FailureTimeout: net.FailureTimeout, ConnectTimeout: net.ConnectTimeout}.WithDefaults(tier.Network)
				if tiers != tc.network {
					t.Errorf("nexar is given %+v, the Plan says %+v", tiers, tc.network)
				}
			}
			if tc.node != (tier.Timeouts{}) {
				tiers := tier.Timeouts{Timeout: opt.Shm.Timeout, FailureTimeout: opt.Shm.FailureTimeout, ConnectTimeout: opt.Shm.ConnectTimeout}.WithDefaults(tier.SharedMemory)
				if tiers != tc.node {
					t.Errorf("shm is given %+v, the Plan says %+v", tiers, tc.node)
				}
			}
		})
	}
}

// Ranks given different FailureTimeouts do not form a world: the
// settings membership compares (planSettings) differ in the tier's
// FailureTimeout and in nothing else, and ranks given the same agree.
func TestRanksAgreeOnFailureTimeouts(t *testing.T) {
	l := launchenv.Launch{Network: "tcp"}
	base := planSettings(l, -1, Options{}.withDefaults(nil))
	for _, tc := range []struct {
		opt  Options
		diff string // the setting's name that differs from base's, or ""
	}{
		{Options{}, ""},
		{Options{FailureTimeout: 10 * time.Second, Shm: shm.Config{FailureTimeout: 5 * time.Second}}, ""}, // the defaults, given
		{Options{Timeout: time.Minute, ConnectTimeout: time.Second}, ""},                                  // may differ
		{Options{Shm: shm.Config{FailureTimeout: time.Second}}, "shared memory's FailureTimeout (Options.Shm.FailureTimeout, else Options.FailureTimeout)"},
		{Options{FailureTimeout: 10 * time.Second, Shm: shm.Config{FailureTimeout: time.Second}}, "shared memory's FailureTimeout (Options.Shm.FailureTimeout, else Options.FailureTimeout)"},
		{Options{FailureTimeout: 3 * time.Second, Shm: shm.Config{FailureTimeout: 5 * time.Second}}, "the network's FailureTimeout (Options.FailureTimeout)"},
	} {
		got := planSettings(l, -1, tc.opt.withDefaults(nil))
		if len(got) != len(base) {
			t.Fatalf("%+v: %d settings, want %d", tc.opt, len(got), len(base))
		}
		var diff []string
		for i := range got {
			if got[i] != base[i] {
				diff = append(diff, got[i].Name)
			}
		}
		switch {
		case tc.diff == "" && len(diff) > 0:
			t.Errorf("FailureTimeout %v, Shm's %v: settings %q differ from the defaults'", tc.opt.FailureTimeout, tc.opt.Shm.FailureTimeout, diff)
		case tc.diff != "" && (len(diff) != 1 || diff[0] != tc.diff):
			t.Errorf("FailureTimeout %v, Shm's %v: settings %q differ from the defaults', want %q alone", tc.opt.FailureTimeout, tc.opt.Shm.FailureTimeout, diff, tc.diff)
		}
	}
}
