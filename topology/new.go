package topology

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// New builds the Topology of a member set. members is not modified and may
// be in any order: New sorts a copy, so every process given the same set
// builds an identical Topology and, when the set is wrong, reports the same
// error.
//
// Either every member has Rank >= 0 (the launcher assigned the ranks, which
// must then be exactly 0..N-1, in any placement) or every member has Rank
// -1, and New assigns them node-major: hosts in natural order ("node-2"
// before "node-10"), within a host by Local. Every member needs a Host, a
// Local >= 0 and a Device >= -1; the Local indices of each host must be
// exactly 0..g-1; two members must not share a non-empty Addr. An error
// names the members at fault.
func New(members []Member) (*Topology, error) {
	if len(members) == 0 {
		return nil, errors.New("topology: no members: a world has at least one process")
	}
	ms := slices.Clone(members)
	slices.SortFunc(ms, compareMembers)
	if err := checkFields(ms); err != nil {
		return nil, err
	}
	if err := checkAddrs(ms); err != nil {
		return nil, err
	}
	if err := checkLocals(ms); err != nil {
		return nil, err
	}
	if ms[0].Rank == -1 {
		// ms is sorted by host (natural order), then Local: that is the
		// node-major rank order.
		for i := range ms {
			ms[i].Rank = i
		}
	} else if err := checkRanks(ms); err != nil {
		return nil, err
	}
	return build(ms), nil
}

// build groups ms, valid and ranked, into a Topology.
func build(ms []Member) *Topology {
	n := len(ms)
	t := &Topology{members: make([]Member, n), nodeOf: make([]int, n)}
	// ms is sorted by host then Local, so each host's ranks come out in
	// local-rank order.
	byHost := make(map[string][]int)
	for _, m := range ms {
		t.members[m.Rank] = m
		byHost[m.Host] = append(byHost[m.Host], m.Rank)
	}
	index := make(map[string]int, len(byHost))
	for r, m := range t.members {
		i, ok := index[m.Host]
		if !ok {
			i = len(t.nodes)
			index[m.Host] = i
			t.nodes = append(t.nodes, Node{Host: m.Host, Ranks: byHost[m.Host]})
		}
		t.nodeOf[r] = i
	}
	t.minLocal = n
	for _, nd := range t.nodes {
		t.maxLocal = max(t.maxLocal, len(nd.Ranks))
		t.minLocal = min(t.minLocal, len(nd.Ranks))
	}
	t.nodeMajor = t.maxLocal == t.minLocal
	for r, m := range t.members {
		if r != t.nodeOf[r]*t.maxLocal+m.Local {
			t.nodeMajor = false
			break
		}
	}
	return t
}

// checkFields checks each member on its own, and that ranks are all given or
// all left to New.
func checkFields(ms []Member) error {
	for _, m := range ms {
		switch {
		case m.Host == "":
			return fmt.Errorf("topology: %s has no host id: every member needs one (members with the same host share a node)", describe(m))
		case m.Local < 0:
			return fmt.Errorf("topology: %s has local index %d: it must be >= 0 (its index among the processes of its host)", describe(m), m.Local)
		case m.Device < -1:
			return fmt.Errorf("topology: %s has device %d: it must be an accelerator ordinal >= 0, or -1 for none", describe(m), m.Device)
		case m.Rank < -1:
			return fmt.Errorf("topology: %s has rank %d: it must be >= 0, or -1 to have one assigned", describe(m), m.Rank)
		}
	}
	var ranked, unranked *Member
	for i := range ms {
		if ms[i].Rank >= 0 && ranked == nil {
			ranked = &ms[i]
		}
		if ms[i].Rank == -1 && unranked == nil {
			unranked = &ms[i]
		}
	}
	if ranked != nil && unranked != nil {
		return fmt.Errorf("topology: %s gives a rank but %s does not: either every member gives the launcher's rank or every one gives -1 to have ranks assigned by host order",
			describe(*ranked), describe(*unranked))
	}
	return nil
}

// checkAddrs checks that no two members share a data-plane address.
func checkAddrs(ms []Member) error {
	seen := make(map[string]int, len(ms))
	for i, m := range ms {
		if m.Addr == "" {
			continue
		}
		if j, ok := seen[m.Addr]; ok {
			return fmt.Errorf("topology: %s and %s both have address %s: every process needs its own data-plane address",
				describe(ms[j]), describe(m), m.Addr)
		}
		seen[m.Addr] = i
	}
	return nil
}

// checkLocals checks that each host's Local indices are exactly 0..g-1.
// ms is sorted by host, then Local.
func checkLocals(ms []Member) error {
	for start := 0; start < len(ms); {
		end := start + 1
		for end < len(ms) && ms[end].Host == ms[start].Host {
			end++
		}
		host := ms[start:end:end]
		for l := range host {
			if l > 0 && host[l].Local == host[l-1].Local {
				return fmt.Errorf("topology: %s and %s have the same host and local index: each process of a host needs its own (LOCAL_RANK)",
					describe(host[l-1]), describe(host[l]))
			}
		}
		for l, m := range host {
			if m.Local != l {
				locals := make([]int, len(host))
				for i, m := range host {
					locals[i] = m.Local
				}
				return fmt.Errorf("topology: host %q has local indices %s: %d is missing (a host's local indices must be 0 to its process count - 1)",
					ms[start].Host, formatInts(locals, ", "), l)
			}
		}
		start = end
	}
	return nil
}

// checkRanks checks that the given ranks are exactly 0..len(ms)-1.
func checkRanks(ms []Member) error {
	n := len(ms)
	owner := make([]int, n) // rank -> index in ms + 1; 0: none yet
	for i, m := range ms {
		if m.Rank >= n {
			return fmt.Errorf("topology: %s has rank %d, not in [0, %d): the ranks of %d members must be 0 to %d",
				describe(m), m.Rank, n, n, n-1)
		}
		if j := owner[m.Rank]; j != 0 {
			return fmt.Errorf("topology: %s and %s both have rank %d: every rank must be given exactly once",
				describe(ms[j-1]), describe(m), m.Rank)
		}
		owner[m.Rank] = i + 1
	}
	return nil
}

// compareMembers is the canonical order of New's input: host in natural
// order, then Local, then the rest, so that New's result and its errors do
// not depend on the order members arrived in.
func compareMembers(a, b Member) int {
	if c := compareHosts(a.Host, b.Host); c != 0 {
		return c
	}
	if c := a.Local - b.Local; c != 0 {
		return sign(c)
	}
	if c := a.Rank - b.Rank; c != 0 {
		return sign(c)
	}
	if c := a.Device - b.Device; c != 0 {
		return sign(c)
	}
	if c := strings.Compare(a.Addr, b.Addr); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

func sign(c int) int {
	switch {
	case c < 0:
		return -1
	case c > 0:
		return 1
	}
	return 0
}

// describe names a member in an error message by everything that helps find
// it: its name, host, local index, rank and address.
func describe(m Member) string {
	var b strings.Builder
	b.WriteString("member ")
	if m.Name != "" {
		b.WriteString(strconv.Quote(m.Name))
		b.WriteByte(' ')
	}
	fmt.Fprintf(&b, "(host %q, local %d", m.Host, m.Local)
	if m.Rank >= 0 {
		fmt.Fprintf(&b, ", rank %d", m.Rank)
	} else if m.Rank == -1 {
		b.WriteString(", no rank")
	}
	if m.Addr != "" {
		fmt.Fprintf(&b, ", addr %s", m.Addr)
	}
	b.WriteByte(')')
	return b.String()
}

// maxListed bounds how many numbers an error message or table lists.
const maxListed = 16

// formatInts writes xs separated by sep, eliding the middle of long lists.
func formatInts(xs []int, sep string) string {
	var parts []string
	if len(xs) <= maxListed {
		for _, x := range xs {
			parts = append(parts, strconv.Itoa(x))
		}
	} else {
		for _, x := range xs[:maxListed-2] {
			parts = append(parts, strconv.Itoa(x))
		}
		parts = append(parts, "...", strconv.Itoa(xs[len(xs)-1]))
	}
	return strings.Join(parts, sep)
}
