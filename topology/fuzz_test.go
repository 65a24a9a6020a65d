package topology

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"
)

// FuzzLoad feeds Load arbitrary bytes (a dump may come from a file or a
// peer): it must not panic, and whatever it accepts must be a valid
// Topology whose dump loads back to an equal one.
func FuzzLoad(f *testing.F) {
	for _, c := range layouts {
		top, err := New(c.members)
		if err != nil {
			f.Fatal(err)
		}
		data, err := json.Marshal(top)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"version":1,"members":[{"rank":-1,"host":"n2","local":0,"device":-1},{"rank":-1,"host":"n10","local":0,"device":-1}]}`))
	f.Add([]byte(`{"version":1,"members":[{"rank":3,"host":"a","local":0,"device":0}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		top, err := Load(bytes.NewReader(data))
		if err != nil {
			return
		}
		checkInvariants(t, top)
		again, err := json.Marshal(top)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Load(bytes.NewReader(again))
		if err != nil {
			t.Fatalf("Load of a dump of an accepted topology: %v\n%s", err, again)
		}
		if !back.Equal(top) {
			t.Fatalf("round trip changed the topology:\n%v\n%v", top, back)
		}
	})
}

// TestRandomPlacements builds random heterogeneous worlds with random rank
// placements and checks the invariants that tie the queries together.
func TestRandomPlacements(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 300 {
		numNodes := 1 + rng.IntN(6)
		var ms []Member
		for n := range numNodes {
			for l := range 1 + rng.IntN(4) {
				ms = append(ms, Member{Host: "h" + string(rune('a'+n)), Local: l, Device: l})
			}
		}
		assign := rng.IntN(2) == 0
		perm := rng.Perm(len(ms))
		for i := range ms {
			ms[i].Rank = -1
			if !assign {
				ms[i].Rank = perm[i]
			}
		}
		top, err := New(ms)
		if err != nil {
			t.Fatalf("New(%v): %v", ms, err)
		}
		checkInvariants(t, top)
		if assign && !slices.IsSorted(top.RingOrder()) {
			t.Fatalf("assigned ranks are not node-contiguous: RingOrder = %v", top.RingOrder())
		}
		if assign {
			if _, homogeneous := top.RanksPerNode(); top.NodeMajor() != homogeneous {
				t.Fatalf("assigned ranks, homogeneous %v but NodeMajor %v:\n%v", homogeneous, top.NodeMajor(), top)
			}
		}
	}
}

// checkInvariants checks the relations every Topology must satisfy.
func checkInvariants(t *testing.T, top *Topology) {
	t.Helper()
	n := top.Size()
	seen := make([]bool, n)
	g, homogeneous := top.RanksPerNode()
	nodeMajor := homogeneous
	for i, nd := range top.Nodes() {
		if len(nd.Ranks) == 0 || len(nd.Ranks) > g {
			t.Fatalf("node %d has %d ranks, RanksPerNode = %d", i, len(nd.Ranks), g)
		}
		if homogeneous && len(nd.Ranks) != g {
			t.Fatalf("homogeneous but node %d has %d ranks, not %d", i, len(nd.Ranks), g)
		}
		if i > 0 && slices.Min(nd.Ranks) < slices.Min(top.Nodes()[i-1].Ranks) {
			t.Fatalf("nodes not in order of their smallest rank: %v", top.Nodes())
		}
		for l, r := range nd.Ranks {
			if seen[r] {
				t.Fatalf("rank %d on two nodes", r)
			}
			seen[r] = true
			m := top.Member(r)
			if m.Rank != r || m.Host != nd.Host || m.Local != l || top.NodeOf(r) != i || top.LocalRank(r) != l {
				t.Fatalf("node %d local %d is rank %d, but Member = %+v, NodeOf = %d", i, l, r, m, top.NodeOf(r))
			}
			if r != i*g+l {
				nodeMajor = false
			}
			c := top.Colors(r)
			if c.Intra != i || c.IntraKey != l || c.Rail != l || c.RailKey != i || c.LeadsKey != i || (c.Leads == 0) != (l == 0) {
				t.Fatalf("Colors(%d) = %+v for node %d local %d", r, c, i, l)
			}
		}
	}
	if slices.Contains(seen, false) {
		t.Fatalf("some rank is on no node: %v", top.Nodes())
	}
	if top.NodeMajor() != nodeMajor {
		t.Fatalf("NodeMajor = %v, want %v", top.NodeMajor(), nodeMajor)
	}
	total := 0
	for l, rail := range top.Rails() {
		for _, r := range rail {
			if top.LocalRank(r) != l {
				t.Fatalf("rail %d holds rank %d of local rank %d", l, r, top.LocalRank(r))
			}
		}
		total += len(rail)
	}
	if total != n {
		t.Fatalf("rails hold %d ranks, want %d", total, n)
	}
	ring := slices.Clone(top.RingOrder())
	slices.Sort(ring)
	for i, r := range ring {
		if r != i {
			t.Fatalf("RingOrder %v is not a permutation", top.RingOrder())
		}
	}
}
