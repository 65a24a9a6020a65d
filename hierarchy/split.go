package hierarchy

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/topology"
)

// Split implements comm.Communicator. It is a collective on the hierarchy,
// ordered with its other collectives: the ranks' (color, key) go round
// through an AllGather on the world part, so that every rank computes every
// child's topology; the world part and the intra part are split by color
// (ranks keep their order: by key, then by rank), and each child that
// spans several nodes with several ranks on some node splits its own rails
// off its world. Such a child is again hierarchical; a child on one node is
// the intra part's split (shared memory stays shared memory), a child with
// one rank per node the world part's.
func (h *Comm) Split(ctx context.Context, color, key int) (comm.Communicator, error) {
	var out comm.Communicator
	var verr error
	switch {
	case color < 0 && color != comm.NoColor:
		verr = &comm.ArgError{Kind: comm.KindSplit, Arg: "color", Problem: fmt.Sprintf("%d is negative; use a color ≥ 0, or comm.NoColor (%d) to take part without joining", color, comm.NoColor)}
	case h.childStager() == nil:
		verr = &comm.ArgError{Kind: comm.KindSplit, Arg: "Config.NewStager", Problem: fmt.Sprintf(
			"is nil, and the child cannot share this communicator's Stager (%T: it serves one executor); set Config.NewStager", h.cfg.Stager)}
	}
	split := func(t *task) error {
		var err error
		out, err = h.split(t, color, key)
		return err
	}
	if err := h.exec.Do(ctx, comm.Call{Kind: comm.KindSplit}, verr, split); err != nil {
		return nil, err
	}
	return out, nil
}

func (h *Comm) split(t *task, color, key int) (comm.Communicator, error) {
	ctx := t.Ctx
	x := &phases{h: h, ctx: ctx, kind: comm.KindSplit, seq: t.Seq, sig: comm.Signature{Kind: comm.KindSplit, DType: comm.I64, Root: -1, Count: 2}}
	x.outer = tier.OuterAt(x.sig, t.Seq)
	if t.Err != nil {
		x.abandoned = h.opError(comm.KindSplit, t.Seq, -1, t.Err)
	}
	mine := []int64{int64(color), int64(key)}
	all := make([]int64, 2*h.size)
	if !x.do(h.worldPart(), comm.Call{Kind: comm.KindAllGather, Send: comm.Host(mine), Recv: comm.Host(all)}) {
		return nil, x.err()
	}
	// Every child's members in their new order (by key, then rank), and
	// every rank's place in its child: node index (nodes in the order of
	// their smallest new rank, as topology.New numbers them) and local
	// rank. Every rank computes all of it, because the rails of every
	// child are split off this world in one Split (a child's own world
	// could be aborted by a fast member's failure in the child before a
	// slow one has built its rails). Rail colors number the (child, local
	// rank) pairs in order.
	colors, keys := make([]int, h.size), make([]int, h.size)
	for r := range h.size {
		colors[r], keys[r] = int(all[2*r]), int(all[2*r+1])
	}
	groups := tier.SplitGroups(colors, keys)
	type place struct{ node, local int }
	places := make([]place, h.size)
	newRank, railColor := -1, comm.NoColor
	railBase := 0
	for _, c := range slices.Sorted(maps.Keys(groups)) {
		ms := groups[c]
		nodes, locals := map[string]int{}, map[string]int{}
		rails := 0
		for i, r := range ms {
			host := h.topo.Member(r).Host
			if _, ok := nodes[host]; !ok {
				nodes[host] = len(nodes)
			}
			places[r] = place{node: nodes[host], local: locals[host]}
			locals[host]++
			rails = max(rails, locals[host])
			if r == h.rank {
				newRank = i
			}
		}
		if c == color {
			railColor = railBase + places[h.rank].local
		}
		railBase += rails
	}

	var made []comm.Communicator
	fail := func(what string, err error) (comm.Communicator, error) {
		for _, c := range made {
			c.Close()
		}
		x.fail(part{name: what}, err)
		return nil, x.err()
	}
	world, err := h.world.Split(ctx, color, key)
	if err != nil {
		return fail("splitting the world part", err)
	}
	if world != nil {
		made = append(made, world)
	}
	// Within a node the intra part's ranks are ordered by their new rank.
	intra, err := h.intra.Split(ctx, color, newRank)
	if err != nil {
		return fail("splitting the intra-node part", err)
	}
	if intra != nil {
		made = append(made, intra)
	}
	// The rail's key is the child's node index.
	rail, err := h.world.Split(ctx, railColor, places[h.rank].node)
	if err != nil {
		return fail("splitting the child's rails", err)
	}
	if rail != nil {
		made = append(made, rail)
	}
	if color == comm.NoColor {
		return nil, nil
	}
	members := make([]topology.Member, len(groups[color]))
	for i, r := range groups[color] {
		m := h.topo.Member(r)
		members[i] = topology.Member{Rank: i, Host: m.Host, Local: places[r].local, Device: m.Device, Addr: m.Addr, Name: m.Name}
	}
	ct, err := topology.New(members)
	if err != nil {
		return fail("the child's topology", err)
	}
	g, homogeneous := ct.RanksPerNode()
	switch {
	case ct.NumNodes() == 1:
		world.Close()
		rail.Close()
		return intra, nil
	case homogeneous && g == 1:
		intra.Close()
		rail.Close()
		return world, nil
	}
	cfg := h.cfg
	cfg.Topology, cfg.Rank, cfg.World, cfg.Intra, cfg.Rail = ct, newRank, world, intra, rail
	cfg.Name = fmt.Sprintf("%s/split(color %d)", h.cfg.Name, color)
	cfg.Stager, cfg.NewStager = nil, h.childStager()
	child, err := New(cfg)
	if err != nil {
		return fail("building the child", err)
	}
	return child, nil
}

// childStager is what makes a Split child's Stager, or nil when none can
// be made (see Config.NewStager).
func (h *Comm) childStager() func() Stager {
	if h.cfg.NewStager != nil {
		return h.cfg.NewStager
	}
	if _, ok := h.cfg.Stager.(HostStager); ok {
		return func() Stager { return NewHostStager() }
	}
	return nil
}
