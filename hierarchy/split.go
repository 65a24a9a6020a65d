package hierarchy

import (
	"context"
	"fmt"
	"slices"

	"github.com/hiercomm/hiercomm/comm"
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
	t := &task{ctx: ctx, call: comm.Call{Kind: comm.KindSplit}}
	if color < 0 && color != comm.NoColor {
		t.verr = &comm.ArgError{Kind: comm.KindSplit, Arg: "color", Problem: fmt.Sprintf("%d is negative; use a color ≥ 0, or comm.NoColor (%d) to take part without joining", color, comm.NoColor)}
	}
	t.split = func(ctx context.Context) error {
		var err error
		out, err = h.split(ctx, t, color, key)
		return err
	}
	if err := h.enqueue(t).Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

func (h *Comm) split(ctx context.Context, t *task, color, key int) (comm.Communicator, error) {
	x := &phases{h: h, ctx: ctx, kind: comm.KindSplit, seq: t.seq, sig: comm.Signature{Kind: comm.KindSplit, DType: comm.I64, Root: -1, Count: 2}}
	if t.verr != nil {
		x.abandoned = h.opError(comm.KindSplit, t.seq, -1, t.verr)
	}
	mine := []int64{int64(color), int64(key)}
	all := make([]int64, 2*h.size)
	if !x.do(h.worldPart(), comm.Call{Kind: comm.KindAllGather, Send: comm.Host(mine), Recv: comm.Host(all)}) {
		return nil, x.err()
	}
	// The members of this rank's color, in their new order.
	type member struct{ key, rank int }
	var group []member
	for r := range h.size {
		if int(all[2*r]) == color {
			group = append(group, member{key: int(all[2*r+1]), rank: r})
		}
	}
	slices.SortStableFunc(group, func(a, b member) int {
		if a.key != b.key {
			return a.key - b.key
		}
		return a.rank - b.rank
	})
	newRank := -1
	for i, m := range group {
		if m.rank == h.rank {
			newRank = i
		}
	}
	// Every rank's child topology position, computed on every rank from
	// the exchange: the rails of every child are split off this world in
	// one Split (a child's own world could be aborted by a fast member's
	// failure in the child before a slow one has built its rails).
	type place struct{ color, node, local int }
	places := make([]place, h.size)
	{
		byColor := map[int][]member{}
		for r := range h.size {
			c := int(all[2*r])
			if c != comm.NoColor {
				byColor[c] = append(byColor[c], member{key: int(all[2*r+1]), rank: r})
			}
		}
		for c, ms := range byColor {
			slices.SortStableFunc(ms, func(a, b member) int {
				if a.key != b.key {
					return a.key - b.key
				}
				return a.rank - b.rank
			})
			nodeIdx := map[string]int{}
			locals := map[string]int{}
			for _, m := range ms {
				host := h.topo.Member(m.rank).Host
				if _, ok := nodeIdx[host]; !ok {
					nodeIdx[host] = len(nodeIdx)
				}
				places[m.rank] = place{color: c, node: nodeIdx[host], local: locals[host]}
				locals[host]++
			}
		}
		for r := range h.size {
			if int(all[2*r]) == comm.NoColor {
				places[r] = place{color: comm.NoColor}
			}
		}
	}
	// Rail colors: one per (child color, child local rank), numbered in
	// order.
	type railID struct{ color, local int }
	var ids []railID
	for _, p := range places {
		if p.color != comm.NoColor {
			ids = append(ids, railID{p.color, p.local})
		}
	}
	slices.SortFunc(ids, func(a, b railID) int {
		if a.color != b.color {
			return a.color - b.color
		}
		return a.local - b.local
	})
	ids = slices.Compact(ids)

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
	me := places[h.rank]
	railColor := comm.NoColor
	if color != comm.NoColor {
		railColor, _ = slices.BinarySearchFunc(ids, railID{me.color, me.local}, func(a, b railID) int {
			if a.color != b.color {
				return a.color - b.color
			}
			return a.local - b.local
		})
	}
	// Nodes are numbered in a child by their smallest new rank, which is
	// the order in which the members are visited above; the rail's key is
	// the child node index.
	rail, err := h.world.Split(ctx, railColor, me.node)
	if err != nil {
		return fail("splitting the child's rails", err)
	}
	if rail != nil {
		made = append(made, rail)
	}
	if color == comm.NoColor {
		return nil, nil
	}
	members := make([]topology.Member, len(group))
	locals := map[string]int{}
	for i, g := range group {
		m := h.topo.Member(g.rank)
		members[i] = topology.Member{Rank: i, Host: m.Host, Local: locals[m.Host], Device: m.Device, Addr: m.Addr, Name: m.Name}
		locals[m.Host]++
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
	cfg.Stager = nil
	if _, ok := h.cfg.Stager.(HostStager); !ok {
		cfg.Stager = h.cfg.Stager
	}
	child, err := New(cfg)
	if err != nil {
		return fail("building the child", err)
	}
	return child, nil
}
