package topology

import (
	"fmt"
	"slices"
)

// Grown is the topology of t's members and newcomers together, as a
// communicator that grew by them has it: t's members keep their ranks
// and local indices, and the newcomers follow them, ranks t.Size() on, in
// the canonical order (host in natural order, then Local, then Name), so
// every process given the same newcomers builds the same Topology. A
// newcomer's Rank is ignored and its Local renumbered: on a host of t it
// comes after that host's members, on a new host from 0, in the order
// of its Local. A newcomer needs a Host and a Device >= -1; its Addr, if
// set, must not be one of t's.
func (t *Topology) Grown(newcomers []Member) (*Topology, error) {
	if len(newcomers) == 0 {
		return t, nil
	}
	order := slices.Clone(newcomers)
	for i := range order {
		order[i].Rank = 0 // not compared: the canonical order is by place
	}
	slices.SortFunc(order, compareMembers)
	next := map[string]int{}
	for _, m := range t.members {
		next[m.Host]++
	}
	ms := slices.Clone(t.members)
	for i, m := range order {
		if m.Host == "" {
			return nil, fmt.Errorf("topology: newcomer %s has no host id", describe(m))
		}
		m.Rank, m.Local = t.Size()+i, next[m.Host]
		next[m.Host]++
		ms = append(ms, m)
	}
	return New(ms)
}
