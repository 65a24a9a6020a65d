package hiercomm_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/topology"
)

// layoutTopology is a topology of len(layout) nodes with layout[n] ranks
// on node n, node-major.
func layoutTopology(t testing.TB, layout ...int) *topology.Topology {
	t.Helper()
	var members []topology.Member
	for n, g := range layout {
		for l := range g {
			members = append(members, topology.Member{Rank: len(members), Host: fmt.Sprintf("node-%d", n), Local: l, Device: -1})
		}
	}
	topo, err := topology.New(members)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// NewPlan decides what Init builds from the layout, the launch and the
// GPU alone, as Init's documentation lists the cases.
func TestNewPlanLayouts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		layout  []int
		launch  launchenv.Launch
		rank    int
		gpu     int
		want    hiercomm.Layout
		intra   string
		network string
		staged  bool
		nodeP2P string
		via     string
	}{
		{"one process", []int{1}, launchenv.Launch{}, 0, -1, hiercomm.LayoutSingle, "", "memory", false, "", "memory"},
		{"one process, GPU", []int{1}, launchenv.Launch{}, 0, 0, hiercomm.LayoutSingle, "nccl", "memory", false, "", "nccl"},
		{"one process, launcher's sockets", []int{1}, launchenv.Launch{Inherited: true, Network: "tcp"}, 0, -1, hiercomm.LayoutFlat, "", "tcp", false, "", "tcp"},
		{"one process, launcher's sockets, GPU", []int{1}, launchenv.Launch{Inherited: true}, 0, 0, hiercomm.LayoutNode, "nccl", "quic", false, "", "nccl"},
		{"one node", []int{4}, launchenv.Launch{}, 2, -1, hiercomm.LayoutNode, "shm", "", false, "", "shm"},
		{"one node, GPUs", []int{4}, launchenv.Launch{}, 2, 2, hiercomm.LayoutNode, "nccl", "", false, "", "nccl"},
		{"one node, intra nexar", []int{3}, launchenv.Launch{Intra: "nexar", Network: "tcp"}, 1, -1, hiercomm.LayoutFlat, "", "tcp", false, "", "tcp"},
		{"a rank per node", []int{1, 1, 1}, launchenv.Launch{}, 1, -1, hiercomm.LayoutFlat, "", "quic", false, "", "quic"},
		{"single-GPU nodes", []int{1, 1, 1}, launchenv.Launch{Network: "tcp"}, 1, 0, hiercomm.LayoutFlat, "", "tcp", true, "", "tcp between single-GPU nodes, staged through host memory"},
		{"2 × 2", []int{2, 2}, launchenv.Launch{}, 3, -1, hiercomm.LayoutHierarchy, "shm", "quic", false, "world when crowded", "hierarchy: shm within nodes, quic between"},
		{"2 + 3", []int{2, 3}, launchenv.Launch{Network: "tcp", NodeP2P: "intra"}, 4, -1, hiercomm.LayoutHierarchy, "shm", "tcp", false, "intra", "hierarchy: shm within nodes, tcp between"},
		{"2 × 2, intra nexar", []int{2, 2}, launchenv.Launch{Intra: "nexar", NodeP2P: "world"}, 0, -1, hiercomm.LayoutHierarchy, "nexar", "quic", false, "world", "hierarchy: nexar within nodes, quic between"},
		{"2 × 2, GPUs", []int{2, 2}, launchenv.Launch{}, 1, 1, hiercomm.LayoutHierarchy, "nccl", "quic", true, "intra", "hierarchy: nccl within nodes, quic between (staged through host memory)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo := layoutTopology(t, tc.layout...)
			p, err := hiercomm.NewPlan(tc.launch, topo, tc.rank, tc.gpu, hiercomm.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Layout != tc.want || p.Intra != tc.intra || p.Network != tc.network || p.Staged != tc.staged || p.NodeP2P != tc.nodeP2P {
				t.Errorf("layout %s, intra %q, network %q, staged %v, node p2p %q; want %s, %q, %q, %v, %q",
					p.Layout, p.Intra, p.Network, p.Staged, p.NodeP2P, tc.want, tc.intra, tc.network, tc.staged, tc.nodeP2P)
			}
			if got := p.Via(); got != tc.via {
				t.Errorf("Via() = %q, want %q", got, tc.via)
			}
			if p.Rank != tc.rank || p.Size != topo.Size() || p.Node != topo.NodeOf(tc.rank) || p.LocalRank != topo.LocalRank(tc.rank) || p.Nodes != topo.NumNodes() {
				t.Errorf("the plan places rank %d as rank %d of %d, node %d of %d, local rank %d", tc.rank, p.Rank, p.Size, p.Node, p.Nodes, p.LocalRank)
			}
			s := p.String()
			for _, row := range []string{"rank ", "layout ", "memory ", "timeouts ", "flight recorder "} {
				if !strings.Contains(s, "\n"+row) && !strings.HasPrefix(s, row) {
					t.Errorf("String() has no %q row:\n%s", row, s)
				}
			}
		})
	}
}

// The routes a Plan lists are the cost models' choices, with the sizes
// where they switch; an override (Hierarchy.SmallBytes) is named as what
// decided its route.
func TestNewPlanRoutes(t *testing.T) {
	p, err := hiercomm.NewPlan(launchenv.Launch{Network: "tcp"}, layoutTopology(t, 1, 1, 1, 1), 0, -1, hiercomm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]string{}
	for _, r := range p.Routes {
		routes[r.Op] = r.Choice
		if r.Tier != "tcp (4 ranks)" {
			t.Errorf("a flat world of 4 has a route on tier %q", r.Tier)
		}
	}
	// The default cost model (schedule.DefaultCost) on 4 ranks: doubling
	// for small AllReduces, the ring for large ones.
	if got := routes["AllReduce"]; !strings.HasPrefix(got, "doubling below ") || !strings.HasSuffix(got, ", ring from it") {
		t.Errorf("AllReduce's route: %q", got)
	}
	if got := routes["Broadcast"]; !strings.HasPrefix(got, "tree below ") || !strings.HasSuffix(got, ", chain from it") {
		t.Errorf("Broadcast's route: %q", got)
	}
	p, err = hiercomm.NewPlan(launchenv.Launch{}, layoutTopology(t, 2, 2), 0, -1, hiercomm.Options{Hierarchy: hierarchy.Config{SmallBytes: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range p.Routes {
		if strings.HasPrefix(r.Tier, "hierarchy") && r.Op == "AllReduce" {
			found = true
			if want := "leads below 4097 B, 2d from 4097 B"; r.Choice != want || r.By != "Hierarchy.SmallBytes" {
				t.Errorf("the hierarchy's AllReduce: %q by %q, want %q by Hierarchy.SmallBytes", r.Choice, r.By, want)
			}
		}
	}
	if !found {
		t.Errorf("a 2 × 2 plan has no hierarchy AllReduce route: %v", p.Routes)
	}
}

func TestNewPlanRefusesARankOutsideTheTopology(t *testing.T) {
	if _, err := hiercomm.NewPlan(launchenv.Launch{}, layoutTopology(t, 2), 2, -1, hiercomm.Options{}); err == nil || !strings.Contains(err.Error(), "rank 2") {
		t.Errorf("NewPlan for rank 2 of 2: %v, want an error naming rank 2", err)
	}
}
