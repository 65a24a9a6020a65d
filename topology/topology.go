package topology

import "slices"

// NoColor is the Split color of a rank that joins no communicator; it
// equals comm.NoColor (-1) (topology cannot import comm).
const NoColor = -1

// Member is one process as it announces itself to the others.
type Member struct {
	// Rank is the launcher's global rank, or -1: let New assign one.
	Rank int `json:"rank"`
	// Host is the host id: members with the same Host share a node.
	// Required.
	Host string `json:"host"`
	// Local is the index among the processes of its host (LOCAL_RANK),
	// >= 0. The Local indices of one host are exactly 0..g-1.
	Local int `json:"local"`
	// Device is the accelerator ordinal, -1 for none.
	Device int `json:"device"`
	// Addr is the data-plane address, host:port. Optional; if set, unique.
	Addr string `json:"addr,omitempty"`
	// Name is the membership name, used in messages. Optional.
	Name string `json:"name,omitempty"`
}

// Node is one host and the global ranks on it.
type Node struct {
	Host string `json:"host"`
	// Ranks are the global ranks on this node in local-rank order:
	// Ranks[l] is the rank whose Local is l.
	Ranks []int `json:"ranks"`
}

// Colors are the Split(color, key) arguments that build the hierarchical
// communicator's parts from the world communicator. Every rank computes its
// own with Topology.Colors and passes them to three Splits.
type Colors struct {
	// Intra, IntraKey: node index, local rank. The ranks of one node, in
	// local-rank order (rank l of the new communicator is local rank l).
	Intra, IntraKey int
	// Rail, RailKey: local rank, node index. Rail l: the ranks with local
	// rank l across nodes, in node order. On heterogeneous nodes rail l
	// holds only the nodes with more than l ranks.
	Rail, RailKey int
	// Leads, LeadsKey: 0 for a node's lead (local rank 0), NoColor
	// otherwise; node index. The leads, one per node, in node order; it is
	// rail 0 under another name, for the lead-based (heterogeneous) paths.
	Leads, LeadsKey int
}

// Topology is the shape of a job: its members in rank order, grouped into
// nodes. Build one with New or Load; it is immutable and safe for
// concurrent use. Methods that take a rank or a node index panic if it is
// out of range, like a slice index.
//
// Nodes are ordered by their smallest global rank; a node's local rank l is
// the member whose Local is l. When the launcher placed ranks node-major
// (rank = node*G + local), NodeMajor reports true; other placements (Slurm's
// cyclic distribution, uneven nodes) are described exactly, not reordered.
type Topology struct {
	members   []Member // rank order: members[r].Rank == r
	nodes     []Node   // node order: by smallest global rank
	nodeOf    []int    // rank -> node index
	maxLocal  int      // largest node's size
	minLocal  int      // smallest node's size
	nodeMajor bool
}

// Size is the number of ranks.
func (t *Topology) Size() int { return len(t.members) }

// Member returns the member with global rank rank.
func (t *Topology) Member(rank int) Member { return t.members[rank] }

// Members returns a copy of every member, in rank order:
// Members()[r].Rank == r.
func (t *Topology) Members() []Member { return slices.Clone(t.members) }

// Nodes returns a copy of the nodes, in node order.
func (t *Topology) Nodes() []Node {
	out := make([]Node, len(t.nodes))
	for i, n := range t.nodes {
		out[i] = Node{Host: n.Host, Ranks: slices.Clone(n.Ranks)}
	}
	return out
}

// NumNodes is the number of nodes (distinct hosts).
func (t *Topology) NumNodes() int { return len(t.nodes) }

// NodeOf returns the index of rank's node.
func (t *Topology) NodeOf(rank int) int { return t.nodeOf[rank] }

// LocalRank returns rank's index among the ranks of its node (its Local).
func (t *Topology) LocalRank(rank int) int { return t.members[rank].Local }

// LocalSize returns the number of ranks on rank's node.
func (t *Topology) LocalSize(rank int) int { return len(t.nodes[t.nodeOf[rank]].Ranks) }

// Lead returns the global rank of local rank 0 of node. With cyclic
// placement it need not be the node's smallest rank.
func (t *Topology) Lead(node int) int { return t.nodes[node].Ranks[0] }

// Leads returns every node's lead, in node order.
func (t *Topology) Leads() []int {
	out := make([]int, len(t.nodes))
	for i, n := range t.nodes {
		out[i] = n.Ranks[0]
	}
	return out
}

// IsLead reports whether rank is its node's lead (local rank 0).
func (t *Topology) IsLead(rank int) bool { return t.members[rank].Local == 0 }

// RanksPerNode returns g, the number of ranks on the largest node, and
// whether every node has g ranks.
func (t *Topology) RanksPerNode() (g int, homogeneous bool) {
	return t.maxLocal, t.maxLocal == t.minLocal
}

// NodeMajor reports whether the nodes are homogeneous and every rank is
// node*G + localRank: the placement the 2D decomposition's rank arithmetic
// assumes (a ReduceScatter's chunk r lands on rank r without reordering).
func (t *Topology) NodeMajor() bool { return t.nodeMajor }

// Rails returns the rails: Rails()[l] holds the ranks with local rank l, in
// node order. On heterogeneous nodes rail l holds only the nodes with more
// than l ranks, so later rails are shorter.
func (t *Topology) Rails() [][]int {
	rails := make([][]int, t.maxLocal)
	for _, n := range t.nodes {
		for l, r := range n.Ranks {
			rails[l] = append(rails[l], r)
		}
	}
	return rails
}

// RingOrder returns every rank once, node by node in node order and in
// local order within a node, so that a ring in this order crosses between
// nodes only NumNodes times.
func (t *Topology) RingOrder() []int {
	out := make([]int, 0, len(t.members))
	for _, n := range t.nodes {
		out = append(out, n.Ranks...)
	}
	return out
}

// Colors returns the Split arguments for rank (see Colors).
func (t *Topology) Colors(rank int) Colors {
	node, local := t.nodeOf[rank], t.members[rank].Local
	leads := NoColor
	if local == 0 {
		leads = 0
	}
	return Colors{
		Intra: node, IntraKey: local,
		Rail: local, RailKey: node,
		Leads: leads, LeadsKey: node,
	}
}

// Equal reports whether t and u describe the same members (and so the same
// nodes). Two nil Topologies are equal; nil equals no non-nil one.
func (t *Topology) Equal(u *Topology) bool {
	if t == nil || u == nil {
		return t == u
	}
	return slices.Equal(t.members, u.members)
}
