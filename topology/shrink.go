package topology

import (
	"cmp"
	"fmt"
	"slices"
)

// Survivors is the topology of the members of t at ranks (in increasing
// order, each a rank of t), as a communicator that shrank to them has it
// (comm.Communicator's Shrink): the member at ranks[i] is rank i, a host keeps its
// members' local order with their Local renumbered 0..g-1, and a host
// none of them is on is gone.
func (t *Topology) Survivors(ranks []int) (*Topology, error) {
	if len(ranks) == 0 {
		return nil, fmt.Errorf("topology: no survivors: a world has at least one process")
	}
	for i, r := range ranks {
		if r < 0 || r >= t.Size() || i > 0 && r <= ranks[i-1] {
			return nil, fmt.Errorf("topology: survivors %v are not increasing ranks of a world of %d", ranks, t.Size())
		}
	}
	ms := make([]Member, len(ranks))
	for i, r := range ranks {
		ms[i] = t.members[r]
		ms[i].Rank = i
	}
	// Local order within each host, then 0..g-1.
	order := slices.Clone(ms)
	slices.SortStableFunc(order, func(a, b Member) int {
		if c := compareHosts(a.Host, b.Host); c != 0 {
			return c
		}
		return cmp.Compare(a.Local, b.Local)
	})
	next := map[string]int{}
	for _, m := range order {
		ms[m.Rank].Local = next[m.Host]
		next[m.Host]++
	}
	return New(ms)
}
