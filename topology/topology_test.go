package topology

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// mem is a member with the given rank, host and local index; its device is
// its local index and its name host-local, so messages can be checked.
func mem(rank int, host string, local int) Member {
	return Member{Rank: rank, Host: host, Local: local, Device: local, Name: fmt.Sprintf("%s-%d", host, local)}
}

// grid is nodes × perNode members placed node-major on hosts h0, h1, ...
func grid(nodes, perNode int) []Member {
	var ms []Member
	for n := range nodes {
		for l := range perNode {
			ms = append(ms, mem(n*perNode+l, fmt.Sprintf("h%d", n), l))
		}
	}
	return ms
}

// layout is a member set and everything a Topology must say about it,
// written out by hand rather than computed the way New computes it.
type layout struct {
	name        string
	members     []Member
	nodes       []Node
	g           int
	homogeneous bool
	nodeMajor   bool
	rails       [][]int
	leads       []int
	ring        []int
}

var layouts = []layout{
	{
		name:    "one rank per node",
		members: []Member{mem(0, "a", 0), mem(1, "b", 0), mem(2, "c", 0)},
		nodes:   []Node{{"a", []int{0}}, {"b", []int{1}}, {"c", []int{2}}},
		g:       1, homogeneous: true, nodeMajor: true,
		rails: [][]int{{0, 1, 2}},
		leads: []int{0, 1, 2},
		ring:  []int{0, 1, 2},
	},
	{
		name:    "one node",
		members: []Member{mem(0, "a", 0), mem(1, "a", 1), mem(2, "a", 2)},
		nodes:   []Node{{"a", []int{0, 1, 2}}},
		g:       3, homogeneous: true, nodeMajor: true,
		rails: [][]int{{0}, {1}, {2}},
		leads: []int{0},
		ring:  []int{0, 1, 2},
	},
	{
		name:    "single rank",
		members: []Member{{Rank: 0, Host: "solo", Local: 0, Device: -1}},
		nodes:   []Node{{"solo", []int{0}}},
		g:       1, homogeneous: true, nodeMajor: true,
		rails: [][]int{{0}},
		leads: []int{0},
		ring:  []int{0},
	},
	{
		name:    "2x2",
		members: grid(2, 2),
		nodes:   []Node{{"h0", []int{0, 1}}, {"h1", []int{2, 3}}},
		g:       2, homogeneous: true, nodeMajor: true,
		rails: [][]int{{0, 2}, {1, 3}},
		leads: []int{0, 2},
		ring:  []int{0, 1, 2, 3},
	},
	{
		name:    "2x4",
		members: grid(2, 4),
		nodes:   []Node{{"h0", []int{0, 1, 2, 3}}, {"h1", []int{4, 5, 6, 7}}},
		g:       4, homogeneous: true, nodeMajor: true,
		rails: [][]int{{0, 4}, {1, 5}, {2, 6}, {3, 7}},
		leads: []int{0, 4},
		ring:  []int{0, 1, 2, 3, 4, 5, 6, 7},
	},
	{
		name:    "3x2",
		members: grid(3, 2),
		nodes:   []Node{{"h0", []int{0, 1}}, {"h1", []int{2, 3}}, {"h2", []int{4, 5}}},
		g:       2, homogeneous: true, nodeMajor: true,
		rails: [][]int{{0, 2, 4}, {1, 3, 5}},
		leads: []int{0, 2, 4},
		ring:  []int{0, 1, 2, 3, 4, 5},
	},
	{
		name:    "4x1",
		members: grid(4, 1),
		nodes:   []Node{{"h0", []int{0}}, {"h1", []int{1}}, {"h2", []int{2}}, {"h3", []int{3}}},
		g:       1, homogeneous: true, nodeMajor: true,
		rails: [][]int{{0, 1, 2, 3}},
		leads: []int{0, 1, 2, 3},
		ring:  []int{0, 1, 2, 3},
	},
	{
		name:    "1x4",
		members: grid(1, 4),
		nodes:   []Node{{"h0", []int{0, 1, 2, 3}}},
		g:       4, homogeneous: true, nodeMajor: true,
		rails: [][]int{{0}, {1}, {2}, {3}},
		leads: []int{0},
		ring:  []int{0, 1, 2, 3},
	},
	{
		name:    "heterogeneous 2+3",
		members: []Member{mem(0, "a", 0), mem(1, "a", 1), mem(2, "b", 0), mem(3, "b", 1), mem(4, "b", 2)},
		nodes:   []Node{{"a", []int{0, 1}}, {"b", []int{2, 3, 4}}},
		g:       3, homogeneous: false, nodeMajor: false,
		rails: [][]int{{0, 2}, {1, 3}, {4}},
		leads: []int{0, 2},
		ring:  []int{0, 1, 2, 3, 4},
	},
	{
		name:    "heterogeneous 3+1+2",
		members: []Member{mem(0, "a", 0), mem(1, "a", 1), mem(2, "a", 2), mem(3, "b", 0), mem(4, "c", 0), mem(5, "c", 1)},
		nodes:   []Node{{"a", []int{0, 1, 2}}, {"b", []int{3}}, {"c", []int{4, 5}}},
		g:       3, homogeneous: false, nodeMajor: false,
		rails: [][]int{{0, 3, 4}, {1, 5}, {2}},
		leads: []int{0, 3, 4},
		ring:  []int{0, 1, 2, 3, 4, 5},
	},
	{
		name:    "cyclic 2x2",
		members: []Member{mem(0, "a", 0), mem(1, "b", 0), mem(2, "a", 1), mem(3, "b", 1)},
		nodes:   []Node{{"a", []int{0, 2}}, {"b", []int{1, 3}}},
		g:       2, homogeneous: true, nodeMajor: false,
		rails: [][]int{{0, 1}, {2, 3}},
		leads: []int{0, 1},
		ring:  []int{0, 2, 1, 3},
	},
	{
		name:    "cyclic 3x2",
		members: []Member{mem(0, "a", 0), mem(1, "b", 0), mem(2, "c", 0), mem(3, "a", 1), mem(4, "b", 1), mem(5, "c", 1)},
		nodes:   []Node{{"a", []int{0, 3}}, {"b", []int{1, 4}}, {"c", []int{2, 5}}},
		g:       2, homogeneous: true, nodeMajor: false,
		rails: [][]int{{0, 1, 2}, {3, 4, 5}},
		leads: []int{0, 1, 2},
		ring:  []int{0, 3, 1, 4, 2, 5},
	},
	{
		// The lead (local 0) is not its node's smallest rank; node order
		// still follows the smallest rank.
		name:    "lead is not the smallest rank",
		members: []Member{mem(1, "a", 0), mem(0, "a", 1), mem(2, "b", 0), mem(3, "b", 1)},
		nodes:   []Node{{"a", []int{1, 0}}, {"b", []int{2, 3}}},
		g:       2, homogeneous: true, nodeMajor: false,
		rails: [][]int{{1, 2}, {0, 3}},
		leads: []int{1, 2},
		ring:  []int{1, 0, 2, 3},
	},
	{
		// Given ranks decide the node order, not the host names.
		name:    "given ranks against host order",
		members: []Member{mem(0, "z", 0), mem(1, "z", 1), mem(2, "a", 0), mem(3, "a", 1)},
		nodes:   []Node{{"z", []int{0, 1}}, {"a", []int{2, 3}}},
		g:       2, homogeneous: true, nodeMajor: true,
		rails: [][]int{{0, 2}, {1, 3}},
		leads: []int{0, 2},
		ring:  []int{0, 1, 2, 3},
	},
	{
		name: "assigned, natural host order",
		members: []Member{
			mem(-1, "node-10", 1), mem(-1, "node-2", 0), mem(-1, "node-10", 0),
			mem(-1, "node-1", 1), mem(-1, "node-2", 1), mem(-1, "node-1", 0),
		},
		nodes: []Node{{"node-1", []int{0, 1}}, {"node-2", []int{2, 3}}, {"node-10", []int{4, 5}}},
		g:     2, homogeneous: true, nodeMajor: true,
		rails: [][]int{{0, 2, 4}, {1, 3, 5}},
		leads: []int{0, 2, 4},
		ring:  []int{0, 1, 2, 3, 4, 5},
	},
	{
		name: "assigned, heterogeneous",
		members: []Member{
			mem(-1, "gpu10", 0), mem(-1, "gpu9", 2), mem(-1, "gpu9", 0), mem(-1, "gpu9", 1),
		},
		nodes: []Node{{"gpu9", []int{0, 1, 2}}, {"gpu10", []int{3}}},
		g:     3, homogeneous: false, nodeMajor: false,
		rails: [][]int{{0, 3}, {1}, {2}},
		leads: []int{0, 3},
		ring:  []int{0, 1, 2, 3},
	},
}

func TestLayouts(t *testing.T) {
	for _, c := range layouts {
		t.Run(c.name, func(t *testing.T) {
			in := slices.Clone(c.members)
			top, err := New(in)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if !slices.Equal(in, c.members) {
				t.Errorf("New modified its input: %v, was %v", in, c.members)
			}
			if got := top.Size(); got != len(c.members) {
				t.Errorf("Size = %d, want %d", got, len(c.members))
			}
			if got := top.Nodes(); !nodesEqual(got, c.nodes) {
				t.Errorf("Nodes = %v, want %v", got, c.nodes)
			}
			if got := top.NumNodes(); got != len(c.nodes) {
				t.Errorf("NumNodes = %d, want %d", got, len(c.nodes))
			}
			if g, h := top.RanksPerNode(); g != c.g || h != c.homogeneous {
				t.Errorf("RanksPerNode = %d, %v; want %d, %v", g, h, c.g, c.homogeneous)
			}
			if got := top.NodeMajor(); got != c.nodeMajor {
				t.Errorf("NodeMajor = %v, want %v", got, c.nodeMajor)
			}
			if got := top.Rails(); !ranksEqual(got, c.rails) {
				t.Errorf("Rails = %v, want %v", got, c.rails)
			}
			if got := top.Leads(); !slices.Equal(got, c.leads) {
				t.Errorf("Leads = %v, want %v", got, c.leads)
			}
			if got := top.RingOrder(); !slices.Equal(got, c.ring) {
				t.Errorf("RingOrder = %v, want %v", got, c.ring)
			}
			for i, n := range c.nodes {
				if got := top.Lead(i); got != n.Ranks[0] {
					t.Errorf("Lead(%d) = %d, want %d", i, got, n.Ranks[0])
				}
				for l, r := range n.Ranks {
					if got := top.NodeOf(r); got != i {
						t.Errorf("NodeOf(%d) = %d, want %d", r, got, i)
					}
					if got := top.LocalRank(r); got != l {
						t.Errorf("LocalRank(%d) = %d, want %d", r, got, l)
					}
					if got := top.LocalSize(r); got != len(n.Ranks) {
						t.Errorf("LocalSize(%d) = %d, want %d", r, got, len(n.Ranks))
					}
					if got := top.IsLead(r); got != (l == 0) {
						t.Errorf("IsLead(%d) = %v, want %v", r, got, l == 0)
					}
				}
			}
			ms := top.Members()
			for r, m := range ms {
				if m.Rank != r {
					t.Errorf("Members()[%d].Rank = %d", r, m.Rank)
				}
				if got := top.Member(r); got != m {
					t.Errorf("Member(%d) = %v, Members()[%d] = %v", r, got, r, m)
				}
			}
			if !c.assigned() {
				// Given ranks are kept: the members are the input, in rank order.
				want := slices.Clone(c.members)
				slices.SortFunc(want, func(a, b Member) int { return a.Rank - b.Rank })
				if !slices.Equal(ms, want) {
					t.Errorf("Members = %v, want %v", ms, want)
				}
			}
			checkSplits(t, top, c)
		})
	}
}

func (c layout) assigned() bool { return c.members[0].Rank == -1 }

// checkSplits runs Split, as comm defines it (group by color, order by key
// then rank, NoColor joins nothing), over every rank's Colors, and checks
// that the intra communicators are the nodes, the rail ones the rails and
// the leads one the leads.
func checkSplits(t *testing.T, top *Topology, c layout) {
	t.Helper()
	split := func(pick func(Colors) (color, key int)) [][]int {
		type entry struct{ key, rank int }
		groups := map[int][]entry{}
		var colors []int
		for r := range top.Size() {
			color, key := pick(top.Colors(r))
			if color == NoColor {
				continue
			}
			if _, ok := groups[color]; !ok {
				colors = append(colors, color)
			}
			groups[color] = append(groups[color], entry{key, r})
		}
		slices.Sort(colors)
		var out [][]int
		for _, color := range colors {
			g := groups[color]
			slices.SortFunc(g, func(a, b entry) int {
				if a.key != b.key {
					return a.key - b.key
				}
				return a.rank - b.rank
			})
			var ranks []int
			for _, e := range g {
				ranks = append(ranks, e.rank)
			}
			out = append(out, ranks)
		}
		return out
	}
	var nodeRanks [][]int
	for _, n := range c.nodes {
		nodeRanks = append(nodeRanks, n.Ranks)
	}
	if got := split(func(c Colors) (int, int) { return c.Intra, c.IntraKey }); !ranksEqual(got, nodeRanks) {
		t.Errorf("Split by Intra colors = %v, want the nodes %v", got, nodeRanks)
	}
	if got := split(func(c Colors) (int, int) { return c.Rail, c.RailKey }); !ranksEqual(got, c.rails) {
		t.Errorf("Split by Rail colors = %v, want the rails %v", got, c.rails)
	}
	if got := split(func(c Colors) (int, int) { return c.Leads, c.LeadsKey }); !ranksEqual(got, [][]int{c.leads}) {
		t.Errorf("Split by Leads colors = %v, want [%v]", got, c.leads)
	}
}

func TestColorsCyclic(t *testing.T) {
	// node a holds ranks 0 and 2, node b ranks 1 and 3.
	top, err := New([]Member{mem(0, "a", 0), mem(1, "b", 0), mem(2, "a", 1), mem(3, "b", 1)})
	if err != nil {
		t.Fatal(err)
	}
	want := []Colors{
		{Intra: 0, IntraKey: 0, Rail: 0, RailKey: 0, Leads: 0, LeadsKey: 0},
		{Intra: 1, IntraKey: 0, Rail: 0, RailKey: 1, Leads: 0, LeadsKey: 1},
		{Intra: 0, IntraKey: 1, Rail: 1, RailKey: 0, Leads: NoColor, LeadsKey: 0},
		{Intra: 1, IntraKey: 1, Rail: 1, RailKey: 1, Leads: NoColor, LeadsKey: 1},
	}
	for r, w := range want {
		if got := top.Colors(r); got != w {
			t.Errorf("Colors(%d) = %+v, want %+v", r, got, w)
		}
	}
}

func TestShuffleInvariance(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range layouts {
		t.Run(c.name, func(t *testing.T) {
			ref, err := New(c.members)
			if err != nil {
				t.Fatal(err)
			}
			refJSON, err := json.Marshal(ref)
			if err != nil {
				t.Fatal(err)
			}
			for range 20 {
				ms := slices.Clone(c.members)
				rng.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
				top, err := New(ms)
				if err != nil {
					t.Fatalf("New(%v): %v", ms, err)
				}
				if !top.Equal(ref) {
					t.Fatalf("New(%v) = %v, differs from New(%v) = %v", ms, top, c.members, ref)
				}
				got, err := json.Marshal(top)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != string(refJSON) {
					t.Fatalf("JSON of New(%v) =\n%s\nwant\n%s", ms, got, refJSON)
				}
			}
		})
	}
}

func TestAccessorsCopy(t *testing.T) {
	top, err := New(grid(2, 2))
	if err != nil {
		t.Fatal(err)
	}
	ms := top.Members()
	ms[0].Host = "changed"
	nodes := top.Nodes()
	nodes[0].Ranks[0] = 99
	nodes[1].Host = "changed"
	rails := top.Rails()
	rails[0][0] = 99
	top.Leads()[0] = 99
	top.RingOrder()[0] = 99
	if top.Member(0).Host != "h0" || top.Lead(0) != 0 || top.Nodes()[1].Host != "h1" ||
		top.Rails()[0][0] != 0 || top.RingOrder()[0] != 0 || top.Leads()[0] != 0 {
		t.Errorf("changing returned slices changed the Topology:\n%v", top)
	}
}

func TestEqual(t *testing.T) {
	a, _ := New(grid(2, 2))
	b, _ := New(grid(2, 2))
	other := grid(2, 2)
	other[3].Device = 7
	c, _ := New(other)
	d, _ := New(grid(4, 1))
	var nilTop *Topology
	for _, tc := range []struct {
		name string
		x, y *Topology
		want bool
	}{
		{"same members", a, b, true},
		{"itself", a, a, true},
		{"one device differs", a, c, false},
		{"different shape", a, d, false},
		{"nil and non-nil", nilTop, a, false},
		{"non-nil and nil", a, nilTop, false},
		{"both nil", nilTop, nilTop, true},
	} {
		if got := tc.x.Equal(tc.y); got != tc.want {
			t.Errorf("%s: Equal = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestConcurrentUse reads one Topology from many goroutines; under -race it
// checks that the queries do not write (no lazy caches).
func TestConcurrentUse(t *testing.T) {
	top, err := New([]Member{mem(0, "a", 0), mem(1, "a", 1), mem(2, "b", 0), mem(3, "b", 1), mem(4, "b", 2)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for r := range top.Size() {
				_ = top.Colors(r)
				_ = top.LocalSize(r)
			}
			_ = top.Rails()
			_ = top.RingOrder()
			_ = top.String()
			if _, err := json.Marshal(top); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

func nodesEqual(a, b []Node) bool {
	return slices.EqualFunc(a, b, func(x, y Node) bool { return x.Host == y.Host && slices.Equal(x.Ranks, y.Ranks) })
}

func ranksEqual(a, b [][]int) bool {
	return slices.EqualFunc(a, b, func(x, y []int) bool { return slices.Equal(x, y) })
}

// Grown keeps the members' ranks and local indices and numbers the
// newcomers after them, the same whatever order they are given in.
func TestGrown(t *testing.T) {
	old, err := New([]Member{
		{Rank: 0, Host: "a", Local: 0, Device: -1, Addr: "a:1", Name: "a0"},
		{Rank: 1, Host: "a", Local: 1, Device: -1, Addr: "a:2", Name: "a1"},
		{Rank: 2, Host: "b", Local: 0, Device: -1, Addr: "b:1", Name: "b0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	newcomers := []Member{
		{Rank: -1, Host: "c", Local: 3, Device: -1, Addr: "c:1", Name: "c3"},
		{Rank: 7, Host: "b", Local: 1, Device: -1, Addr: "b:9", Name: "b1"},
		{Rank: -1, Host: "a", Local: 1, Device: -1, Addr: "a:9", Name: "a-new"},
	}
	g, err := old.Grown(newcomers)
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(newcomers)
	g2, err := old.Grown(newcomers)
	if err != nil {
		t.Fatal(err)
	}
	if !g.Equal(g2) {
		t.Fatalf("the newcomers' order changed the topology:\n%v\n%v", g, g2)
	}
	want := []struct {
		name  string
		local int
	}{{"a0", 0}, {"a1", 1}, {"b0", 0}, {"a-new", 2}, {"b1", 1}, {"c3", 0}}
	for r, w := range want {
		if m := g.Member(r); m.Name != w.name || m.Local != w.local || m.Rank != r {
			t.Errorf("rank %d: %+v, want %s with local %d", r, m, w.name, w.local)
		}
	}
	if g.NumNodes() != 3 || g.LocalSize(0) != 3 || g.Lead(2) != 5 {
		t.Errorf("nodes: %v", g)
	}
	if same, _ := old.Grown(nil); same != old {
		t.Error("Grown(nil) is not the topology itself")
	}
	if _, err := old.Grown([]Member{{Host: "d", Device: -1, Addr: "a:1"}}); err == nil {
		t.Error("a newcomer with a member's address was accepted")
	}
}
