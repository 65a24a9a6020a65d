package hierarchy

import (
	"context"
	"fmt"
	"slices"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/schedule"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/internal/hoptrace"
)

// run executes one collective, the user's call sig (see the package doc
// for the algorithms).
func (h *Comm) run(t *task, sig comm.Signature) error {
	if t.Err == nil && h.rec == nil && !hoptrace.On() {
		if wc, ok := h.onWorld(t.Call); ok {
			if r, ok := h.world.(tier.Runner); ok {
				return h.runWhole(t, sig, r, wc)
			}
		}
	}
	defer h.cfg.Stager.Reset()
	c := t.Call
	x := &phases{h: h, ctx: t.Ctx, kind: c.Kind, seq: t.Seq, sig: sig}
	x.outer = tier.OuterAt(x.sig, t.Seq)
	if t.Err != nil {
		x.abandoned = h.opError(c.Kind, t.Seq, -1, t.Err)
		stand, ok := h.standIn(c, x.abandoned)
		if !ok {
			// The peers' operations cannot be known: abort, so that
			// none waits for operations this rank will not issue.
			cause := fmt.Errorf("rank %d refused %v and its buffers imply different counts, which its peers would cut into different operations: the hierarchy is aborted (%w)", h.rank, x.sig, t.Err)
			h.abort(cause)
			return x.abandoned
		}
		c = stand
	}
	if h.dispatch(x, c) && c.Kind.Reduces() && c.Op == comm.Avg && x.ok() { // Op means nothing to the other kinds
		if out := tier.ResultAt(c, h.rank); !out.IsZero() {
			x.local("dividing for Avg", h.cfg.Stager.FinishAvg(out, h.size))
		}
	}
	return x.err()
}

// runWhole runs a collective that goes whole to the world part
// (onWorld), a Runner, without the phases' bookkeeping unless it fails:
// the hierarchy's own cost per call, which in a stream of small pipelined
// Broadcasts is what the hierarchy loses to its world part. It issues the
// same operation as the phases would (the user's call as Outer) and maps
// a failure as they do.
func (h *Comm) runWhole(t *task, sig comm.Signature, world tier.Runner, c comm.Call) error {
	outer := tier.OuterAt(sig, t.Seq)
	err := world.Run(tier.WithPhase(t.Ctx, tier.Phase{Outer: outer}), c)
	if err == nil {
		return nil
	}
	x := &phases{h: h, ctx: t.Ctx, kind: t.Call.Kind, seq: t.Seq, sig: sig, outer: outer}
	x.wait(pending{p: h.worldPart(), ran: true, err: err})
	return x.err()
}

// onWorld reports whether c runs whole on the world part, as one
// operation the hierarchy adds no phase to, and the call it runs there: on
// a flat hierarchy everything; with nodes of different sizes, all but the
// lead-based Barrier, AllReduce, Broadcast and Reduce; otherwise a small
// Broadcast (see broadcast) and Scan and ExScan on ranks not numbered node
// by node. It is the same on every rank for the same call.
func (h *Comm) onWorld(c comm.Call) (comm.Call, bool) {
	leads := c.Kind == comm.KindBarrier || c.Kind == comm.KindAllReduce || c.Kind == comm.KindBroadcast || c.Kind == comm.KindReduce
	switch {
	case h.flat:
		return c, true
	case !h.homogeneous:
		return c, !leads
	}
	switch c.Kind {
	case comm.KindBroadcast:
		if h.small(schedule.BroadcastOp, c.Send) {
			return comm.Call{Kind: comm.KindBroadcast, Send: c.Send, Recv: c.Send, Root: c.Root}, true
		}
		return c, false
	case comm.KindScan, comm.KindExScan:
		return c, !h.topo.NodeMajor()
	case comm.KindBarrier, comm.KindAllReduce, comm.KindReduceScatter, comm.KindAllGather, comm.KindReduce,
		comm.KindAllToAll, comm.KindAllToAllV, comm.KindGather, comm.KindScatter:
		return c, false
	}
	return c, true
}

// dispatch runs c's algorithm on x's phases and reports whether the
// result is still to be divided for Avg (false when c ran whole on the
// world part, which divides itself).
func (h *Comm) dispatch(x *phases, c comm.Call) bool {
	if wc, ok := h.onWorld(c); ok {
		x.do(h.worldPart(), wc)
		return false
	}
	op := c.Op
	switch op {
	case comm.Avg:
		// Summed through the phases, divided once at the end.
		op = comm.Sum
	case comm.PreMulSum:
		// Each rank scales its own input once, into scratch; the phases sum.
		op = comm.Sum
		c.Send = x.preMul(c)
	}
	switch {
	case c.Kind == comm.KindBarrier:
		h.barrier(x)
	case c.Kind == comm.KindAllReduce && !h.homogeneous:
		h.allReduceLeads(x, c.Send, c.Recv, op)
	case c.Kind == comm.KindBroadcast && !h.homogeneous:
		h.broadcastLeads(x, c.Send, c.Root)
	case c.Kind == comm.KindReduce && !h.homogeneous:
		h.reduceLeads(x, c.Send, c.Recv, op, c.Root)
	case c.Kind == comm.KindAllReduce:
		if h.small(schedule.AllReduceOp, c.Send) {
			h.allReduceLeads(x, c.Send, c.Recv, op)
		} else {
			h.allReduce2D(x, c.Send, c.Recv, op)
		}
	case c.Kind == comm.KindReduceScatter:
		h.reduceScatter2D(x, c.Send, c.Recv, op)
	case c.Kind == comm.KindAllGather:
		h.allGather2D(x, c.Send, c.Recv)
	case c.Kind == comm.KindBroadcast:
		h.broadcast(x, c.Send, c.Root)
	case c.Kind == comm.KindReduce:
		h.reduce(x, c.Send, c.Recv, op, c.Root)
	case c.Kind == comm.KindAllToAll:
		h.allToAll2D(x, c.Send, c.Recv)
	case c.Kind == comm.KindAllToAllV:
		h.allToAllV(x, c)
	case c.Kind == comm.KindGather:
		h.gather(x, c.Send, c.Recv, c.Root)
	case c.Kind == comm.KindScatter:
		h.scatter(x, c.Send, c.Recv, c.Root)
	case c.Kind == comm.KindScan || c.Kind == comm.KindExScan: // node-major (onWorld)
		h.scan(x, c.Send, c.Recv, op, c.Kind == comm.KindExScan)
	default: // every kind onWorld keeps off the world part has its case above
		x.do(h.worldPart(), c)
		return false
	}
	return true
}

// standIn is a rejected call's stand-in (shapeOf), so that this rank
// issues the same operations as the ranks whose calls are good. The
// operations of a collective depend only on its kind, count and dtype
// size, never on the root, so the stand-in's are its peers' — when this
// rank knows the count. Where its buffers imply different counts (a
// ReduceScatter whose recv is one element short: count n−1 from the recv,
// n from the send), the peers hold one of them (or another still); if
// every count it can read gives the same operations (the plans of a dry
// run, planOf), any stand-in will do; otherwise ok is false, and the
// caller must abort instead of leaving its peers out of step. (A rank that
// passes no buffer where the count comes from cannot know it at all.)
func (h *Comm) standIn(c comm.Call, why error) (stand comm.Call, ok bool) {
	counts := h.countsOf(c)
	stand = h.shapeOf(c, counts[0])
	if len(counts) == 1 {
		return stand, true // one count: nothing to compare (no dry run)
	}
	plan := h.planOf(stand, why)
	for _, n := range counts[1:] {
		if !slices.Equal(h.planOf(h.shapeOf(c, n), why), plan) {
			return stand, false
		}
	}
	return stand, true
}

// countsOf is every element count c's buffers imply, the Signature's
// first, without repeats. A buffer this rank does not use (a non-root's
// recv of Reduce, its send of Scatter: tier.Uses) implies nothing.
func (h *Comm) countsOf(c comm.Call) []int {
	out := []int{max(0, int(c.Signature().Count))}
	useSend, useRecv := tier.Uses(c, h.rank)
	add := func(b comm.Buffer, used bool, per int) {
		if n := b.Len() / per; used && !b.IsZero() && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	switch c.Kind {
	case comm.KindAllReduce, comm.KindReduce, comm.KindScan, comm.KindExScan, comm.KindAllToAll, comm.KindBroadcast:
		add(c.Recv, useRecv, 1)
	case comm.KindReduceScatter, comm.KindScatter:
		add(c.Send, useSend, h.size)
	case comm.KindAllGather, comm.KindGather:
		add(c.Recv, useRecv, h.size)
	}
	return out
}

// planOp is one operation of a collective's plan: the part it runs on
// and its kind.
type planOp struct {
	part string
	kind comm.Kind
}

// planOf is the sequence of operations this rank issues for c once the
// collective is abandoned (why): a dry run of its algorithm that records
// each operation instead of starting it.
func (h *Comm) planOf(c comm.Call, why error) []planOp {
	var ops []planOp
	x := &phases{h: h, ctx: context.Background(), kind: c.Kind, sig: c.Signature(), abandoned: why, dry: &ops}
	h.dispatch(x, c)
	return ops
}

// shapeOf is a stand-in for the rejected call c with count n: buffers of
// the lengths n implies (placeholders the poisoned operations never
// touch) and a root in range.
func (h *Comm) shapeOf(c comm.Call, n int) comm.Call {
	sig := c.Signature()
	dt := sig.DType
	if !dt.Valid() {
		dt = comm.U8
	}
	ph := func(m int) comm.Buffer { return comm.Device(0, m, dt, 0) }
	out := comm.Call{Kind: c.Kind, Op: c.Op, Scalar: c.Scalar, Root: c.Root}
	if out.Root < 0 || out.Root >= h.size {
		out.Root = 0
	}
	switch c.Kind {
	case comm.KindAllReduce, comm.KindReduce:
		out.Send, out.Recv = ph(n), ph(n)
	case comm.KindBroadcast:
		out.Send = ph(n)
		out.Recv = out.Send
	case comm.KindReduceScatter:
		out.Send, out.Recv = ph(h.size*n), ph(n)
	case comm.KindAllGather:
		out.Send, out.Recv = ph(n), ph(h.size*n)
	case comm.KindAllToAll, comm.KindScan, comm.KindExScan:
		out.Send, out.Recv = ph(n), ph(n)
	case comm.KindGather:
		out.Send, out.Recv = ph(n), ph(h.size*n)
	case comm.KindScatter:
		out.Send, out.Recv = ph(h.size*n), ph(n)
	case comm.KindAllToAllV:
		// Its operations do not depend on the counts either.
		out.Send, out.Recv = ph(0), ph(0)
		out.SendCounts, out.RecvCounts = make([]int, h.size), make([]int, h.size)
	default:
		return c // runs on the world part, which rejects it itself
	}
	return out
}

// small reports whether collective c of b's size takes the leads route:
// always when b has fewer elements than a node has ranks (the 2D route
// splits it over them), else below the switch (Config.Switch).
func (h *Comm) small(c schedule.Collective, b comm.Buffer) bool {
	return b.Len() < h.g || b.ByteLen() < h.switchAt[c]
}

// chunks splits [0, n) into pieces of about ChunkBytes (each a multiple of
// unit elements, which must divide n) for the pipelines; perUnitBytes is
// the bytes the whole node moves per element of a piece.
func (h *Comm) chunks(n, unit, bytesPerElem int) [][2]int {
	per := h.cfg.ChunkBytes / max(1, bytesPerElem)
	per = max(unit, per/unit*unit)
	var out [][2]int
	for off := 0; off < n; off += per {
		out = append(out, [2]int{off, min(per, n-off)})
	}
	return out
}

// sliceOr is b.Slice(off, n), or the zero Buffer when b is (a rank that
// has no result buffer: Reduce's non-roots).
func sliceOr(b comm.Buffer, off, n int) comm.Buffer {
	if b.IsZero() {
		return b
	}
	return b.Slice(off, n)
}

// allReduceLeads is the lead-based AllReduce: intra Reduce to the lead,
// AllReduce among the leads, intra Broadcast. It is the latency path, the
// tail of the large path, and every size on heterogeneous nodes.
func (h *Comm) allReduceLeads(x *phases, send, recv comm.Buffer, op comm.ReduceOp) {
	lead := h.local == 0
	var at comm.Buffer
	if lead {
		at = recv
	}
	x.do(h.intraPart(), comm.Call{Kind: comm.KindReduce, Send: send, Recv: at, Op: op, Root: 0})
	if lead {
		x.do(h.railPart(), comm.Call{Kind: comm.KindAllReduce, Send: recv, Recv: recv, Op: op})
	}
	x.do(h.intraPart(), comm.Call{Kind: comm.KindBroadcast, Send: recv, Recv: recv, Root: 0})
}

// allReduce2D is the large AllReduce: per chunk, intra ReduceScatter into
// a shard, AllReduce of the shard on this rank's rail, intra AllGather.
// The intra part runs the ReduceScatters of every chunk, then the
// AllGathers, while the rails work through the shards, so the tiers
// overlap; the order of operations on each part is the same on every rank.
// The last n mod G elements take the lead-based path.
func (h *Comm) allReduce2D(x *phases, send, recv comm.Buffer, op comm.ReduceOp) {
	main, cs, shards, rs := h.shardChunks(x, send, op)
	n := send.Len()
	ar := make([]pending, len(cs))
	for k := range cs {
		x.wait(rs[k])
		if h.leadShardOnly && h.local != 0 {
			continue
		}
		ar[k] = x.pipe(len(cs), h.railPart(), comm.Call{Kind: comm.KindAllReduce, Send: shards[k], Recv: shards[k], Op: op})
	}
	ag := make([]pending, len(cs))
	for k, ch := range cs {
		x.wait(ar[k]) // (none started when the test hook skipped it)
		ag[k] = x.pipe(len(cs), h.intraPart(), comm.Call{Kind: comm.KindAllGather, Send: shards[k], Recv: recv.Slice(ch[0], ch[1])})
	}
	for k := range cs {
		x.wait(ag[k])
	}
	if main < n {
		h.allReduceLeads(x, send.Slice(main, n-main), recv.Slice(main, n-main), op)
	}
}

// shardChunks splits send's first main = len − len mod G elements into
// the chunks of a large path and starts, per chunk, an intra
// ReduceScatter that leaves this rank the node's sum of its 1/G shard.
func (h *Comm) shardChunks(x *phases, send comm.Buffer, op comm.ReduceOp) (main int, cs [][2]int, shards []comm.Buffer, rs []pending) {
	G := h.g
	main = send.Len() - send.Len()%G
	cs = h.chunks(main, G, send.DType().Size())
	shards = make([]comm.Buffer, len(cs))
	rs = make([]pending, len(cs))
	for k, ch := range cs {
		shards[k] = x.alloc(send, ch[1]/G)
		rs[k] = x.pipe(len(cs), h.intraPart(), comm.Call{Kind: comm.KindReduceScatter, Send: send.Slice(ch[0], ch[1]), Recv: shards[k], Op: op})
	}
	return main, cs, shards, rs
}

// pipe issues c on p for one chunk of a pipeline: started, to overlap with
// the other chunks' phases, when there are several; run at once (on this
// goroutine when the part is idle, no hand-off) when there is one, with
// nothing to overlap.
func (x *phases) pipe(chunks int, p part, c comm.Call) pending { return x.issue(p, c, chunks == 1) }

// rankAt is the global rank of local rank l on node m (homogeneous nodes).
func (h *Comm) rankAt(m, l int) int { return h.rails[l][m] }

// reduceScatter2D: rank r = (m, l) wants block r of the reduction. Per
// chunk of every block, the send blocks are permuted so that those of rail
// l's ranks (l, m) sit together in node order; an intra ReduceScatter
// leaves local rank l the node's sum of rail l's blocks, and a
// ReduceScatter on rail l hands node m's member its own block. Across
// nodes each rank sends (N-1)/N of one block, no more.
func (h *Comm) reduceScatter2D(x *phases, send, recv comm.Buffer, op comm.ReduceOp) {
	N := h.topo.NumNodes()
	n := recv.Len()
	cs := h.chunks(n, 1, h.size*recv.DType().Size())
	perm := make([]comm.Buffer, len(cs))
	if x.ok() {
		for k, ch := range cs {
			perm[k] = x.alloc(send, h.size*ch[1])
			h.permute(x, perm[k], send, n, ch, false)
		}
	}
	rs := make([]pending, len(cs))
	parts := make([]comm.Buffer, len(cs))
	for k, ch := range cs {
		parts[k] = x.alloc(send, N*ch[1])
		rs[k] = x.pipe(len(cs), h.intraPart(), comm.Call{Kind: comm.KindReduceScatter, Send: perm[k], Recv: parts[k], Op: op})
	}
	rr := make([]pending, len(cs))
	for k, ch := range cs {
		x.wait(rs[k])
		rr[k] = x.pipe(len(cs), h.railPart(), comm.Call{Kind: comm.KindReduceScatter, Send: parts[k], Recv: recv.Slice(ch[0], ch[1]), Op: op})
	}
	for k := range cs {
		x.wait(rr[k])
	}
}

// permute copies between the rank-order layout (block r of n elements at
// r·n; this chunk is elements [off, off+c) of every block) and the rail
// layout of the chunk (rank (m, l)'s piece at (l·N + m)·c). toRanks says
// which way.
func (h *Comm) permute(x *phases, railLayout, rankLayout comm.Buffer, n int, ch [2]int, toRanks bool) {
	off, c := ch[0], ch[1]
	N := h.topo.NumNodes()
	rail := func(l, m int) int { return (l*N + m) * c }
	rank := func(l, m int) int { return h.rankAt(m, l)*n + off }
	if toRanks {
		h.moveBlocks(x, rankLayout, railLayout, c, rank, rail)
	} else {
		h.moveBlocks(x, railLayout, rankLayout, c, rail, rank)
	}
}

// moveBlocks copies, for every local rank l and node m, the c elements of
// src at from(l, m) to dst at to(l, m); the first failed copy fails the
// collective.
func (h *Comm) moveBlocks(x *phases, dst, src comm.Buffer, c int, to, from func(l, m int) int) {
	for l := range h.g {
		for m := range h.topo.NumNodes() {
			if !x.local("permuting blocks", h.cfg.Stager.Copy(dst.Slice(to(l, m), c), src.Slice(from(l, m), c))) {
				return
			}
		}
	}
}

// allGather2D is reduceScatter2D's inverse: per chunk, an AllGather on
// the rail, an intra AllGather, and the permutation back to rank order.
func (h *Comm) allGather2D(x *phases, send, recv comm.Buffer) {
	N := h.topo.NumNodes()
	n := send.Len()
	cs := h.chunks(n, 1, h.size*send.DType().Size())
	ra := make([]pending, len(cs))
	parts := make([]comm.Buffer, len(cs))
	for k, ch := range cs {
		parts[k] = x.alloc(send, N*ch[1])
		ra[k] = x.pipe(len(cs), h.railPart(), comm.Call{Kind: comm.KindAllGather, Send: send.Slice(ch[0], ch[1]), Recv: parts[k]})
	}
	ia := make([]pending, len(cs))
	perm := make([]comm.Buffer, len(cs))
	for k, ch := range cs {
		x.wait(ra[k])
		perm[k] = x.alloc(send, h.size*ch[1])
		ia[k] = x.pipe(len(cs), h.intraPart(), comm.Call{Kind: comm.KindAllGather, Send: parts[k], Recv: perm[k]})
	}
	for k, ch := range cs {
		if x.wait(ia[k]) {
			h.permute(x, perm[k], recv, n, ch, true)
		}
	}
}

// The rooted collectives have the same operations on every part whatever
// the root (a node that is not the root's takes part with empty buffers):
// a rank whose root is out of range rejects its call and must still issue
// the operations its peers issue, without knowing the root.

// broadcast is the large Broadcast: per chunk the root's node scatters
// the chunk over its ranks, every rail broadcasts its piece from the
// root's node, and every node AllGathers the pieces. A small one is the
// world part's Broadcast (onWorld): its binomial tree over node-major
// ranks crosses nodes in its top levels and stays within them below, the
// leads route's shape, as one operation whose root returns once its
// messages are sent, so back-to-back broadcasts pipeline (the leads route
// on the parts synchronized every call, with an empty Broadcast on every
// rail but the root's: in the bench's stream of 8-byte broadcasts, 0.12×
// the world part's speed).
func (h *Comm) broadcast(x *phases, buf comm.Buffer, root int) {
	mr, lr := h.topo.NodeOf(root), h.topo.LocalRank(root)
	G := h.g
	n := buf.Len()
	main := n - n%G
	cs := h.chunks(main, G, buf.DType().Size())
	pieces := make([]comm.Buffer, len(cs))
	sc := make([]pending, len(cs))
	for k, ch := range cs {
		pieces[k] = x.alloc(buf, ch[1]/G)
		call := comm.Call{Kind: comm.KindScatter, Send: buf.Slice(ch[0], 0), Recv: sliceOr(pieces[k], 0, 0), Root: lr}
		if h.node == mr {
			call.Recv = pieces[k]
			if h.rank == root {
				call.Send = buf.Slice(ch[0], ch[1])
			}
		}
		sc[k] = x.pipe(len(cs), h.intraPart(), call)
	}
	bc := make([]pending, len(cs))
	for k := range cs {
		x.wait(sc[k])
		bc[k] = x.pipe(len(cs), h.railPart(), comm.Call{Kind: comm.KindBroadcast, Send: pieces[k], Recv: pieces[k], Root: mr})
	}
	ag := make([]pending, len(cs))
	for k, ch := range cs {
		x.wait(bc[k])
		ag[k] = x.pipe(len(cs), h.intraPart(), comm.Call{Kind: comm.KindAllGather, Send: pieces[k], Recv: buf.Slice(ch[0], ch[1])})
	}
	for k := range cs {
		x.wait(ag[k])
	}
	if main < n {
		h.broadcastSmall(x, buf.Slice(main, n-main), mr, lr)
	}
}

func (h *Comm) broadcastSmall(x *phases, buf comm.Buffer, mr, lr int) {
	onRail := buf
	if h.local != lr {
		onRail = buf.Slice(0, 0)
	}
	x.do(h.railPart(), comm.Call{Kind: comm.KindBroadcast, Send: onRail, Recv: onRail, Root: mr})
	x.do(h.intraPart(), comm.Call{Kind: comm.KindBroadcast, Send: buf, Recv: buf, Root: lr})
}

// reduce: small, an intra Reduce to the root's local rank on every node,
// then a Reduce on every rail to the root's node (the root's rail with
// data); large, per chunk an intra ReduceScatter, a Reduce of each shard
// on its rail to the root's node, and an intra Gather to the root.
func (h *Comm) reduce(x *phases, send, recv comm.Buffer, op comm.ReduceOp, root int) {
	mr, lr := h.topo.NodeOf(root), h.topo.LocalRank(root)
	if h.rank != root {
		recv = comm.Buffer{}
	}
	if h.small(schedule.ReduceOp, send) {
		h.reduceSmall(x, send, recv, op, mr, lr)
		return
	}
	main, cs, shards, rs := h.shardChunks(x, send, op)
	n := send.Len()
	rd := make([]pending, len(cs))
	for k := range cs {
		x.wait(rs[k])
		var at comm.Buffer
		if h.node == mr {
			at = shards[k]
		}
		rd[k] = x.pipe(len(cs), h.railPart(), comm.Call{Kind: comm.KindReduce, Send: shards[k], Recv: at, Op: op, Root: mr})
	}
	ga := make([]pending, len(cs))
	for k, ch := range cs {
		x.wait(rd[k])
		call := comm.Call{Kind: comm.KindGather, Send: sliceOr(shards[k], 0, 0), Root: lr}
		if h.node == mr {
			call.Send, call.Recv = shards[k], sliceOr(recv, ch[0], ch[1])
		} else if h.local == lr {
			call.Recv = sliceOr(shards[k], 0, 0)
		}
		ga[k] = x.pipe(len(cs), h.intraPart(), call)
	}
	for k := range cs {
		x.wait(ga[k])
	}
	if main < n {
		h.reduceSmall(x, send.Slice(main, n-main), sliceOr(recv, main, n-main), op, mr, lr)
	}
}

func (h *Comm) reduceSmall(x *phases, send, recv comm.Buffer, op comm.ReduceOp, mr, lr int) {
	var at comm.Buffer
	if h.local == lr {
		at = recv
		if at.IsZero() {
			at = x.alloc(send, send.Len())
		}
	}
	x.do(h.intraPart(), comm.Call{Kind: comm.KindReduce, Send: send, Recv: at, Op: op, Root: lr})
	onRail, out := at, recv
	if h.local != lr {
		onRail = send.Slice(0, 0)
		out = comm.Buffer{}
		if h.node == mr {
			out = onRail
		}
	}
	x.do(h.railPart(), comm.Call{Kind: comm.KindReduce, Send: onRail, Recv: out, Op: op, Root: mr})
}

// broadcastLeads is the lead-based Broadcast of heterogeneous nodes: the
// root's node broadcasts from the root, the leads from the root's node's
// lead, every other node from its lead. Every node takes part in both
// intra phases (with an empty buffer where it has nothing to move), so the
// operations do not depend on the root.
func (h *Comm) broadcastLeads(x *phases, buf comm.Buffer, root int) {
	mr, lr := h.topo.NodeOf(root), h.topo.LocalRank(root)
	first, firstRoot, last := buf.Slice(0, 0), 0, buf
	if h.node == mr {
		first, firstRoot, last = buf, lr, buf.Slice(0, 0)
	}
	x.do(h.intraPart(), comm.Call{Kind: comm.KindBroadcast, Send: first, Recv: first, Root: firstRoot})
	if h.local == 0 {
		x.do(h.railPart(), comm.Call{Kind: comm.KindBroadcast, Send: buf, Recv: buf, Root: mr})
	}
	x.do(h.intraPart(), comm.Call{Kind: comm.KindBroadcast, Send: last, Recv: last, Root: 0})
}

// reduceLeads is the lead-based Reduce of heterogeneous nodes: intra
// Reduce to every node's lead, Reduce among the leads to the root's
// node's, and on the root's node a Broadcast from its lead (the others
// take part with an empty buffer).
func (h *Comm) reduceLeads(x *phases, send, recv comm.Buffer, op comm.ReduceOp, root int) {
	mr := h.topo.NodeOf(root)
	var acc comm.Buffer // the node's sum, at the lead; then the result on the root's node
	switch {
	case h.rank == root:
		acc = recv
	case h.local == 0 || h.node == mr:
		acc = x.alloc(send, send.Len())
	}
	var at comm.Buffer
	if h.local == 0 {
		at = acc
	}
	x.do(h.intraPart(), comm.Call{Kind: comm.KindReduce, Send: send, Recv: at, Op: op, Root: 0})
	if h.local == 0 {
		var out comm.Buffer
		if h.node == mr {
			out = acc
		}
		x.do(h.railPart(), comm.Call{Kind: comm.KindReduce, Send: acc, Recv: out, Op: op, Root: mr})
	}
	last := send.Slice(0, 0)
	if h.node == mr {
		last = acc
	}
	x.do(h.intraPart(), comm.Call{Kind: comm.KindBroadcast, Send: last, Recv: last, Root: 0})
}

// allToAll2D is the two-phase AllToAll (MoE-style exchange): an intra
// AllToAll hands local rank l every block this node sends to the ranks
// with local rank l, then an AllToAll on rail l delivers them, node by
// node. The inter-node bytes are those of a flat AllToAll, but each rank
// sends N-1 messages of G blocks across nodes instead of (N-1)·G of one,
// which is what small blocks need. Three local permutations put the blocks
// in order: rank (m', l') 's block at (l'·N + m') for the intra phase,
// (m'·G + l_s) for the rail, rank order at the end.
func (h *Comm) allToAll2D(x *phases, send, recv comm.Buffer) {
	G, N := h.g, h.topo.NumNodes()
	n := send.Len() / h.size
	byLocal := x.alloc(send, h.size*n) // [l'][m']: to (m', l')
	if x.ok() {
		h.permute(x, byLocal, send, n, [2]int{0, n}, false)
	}
	fromLocals := x.alloc(send, h.size*n) // [l_s][m']: from (this node, l_s) to (m', this l)
	x.do(h.intraPart(), comm.Call{Kind: comm.KindAllToAll, Send: byLocal, Recv: fromLocals})
	byNode := x.alloc(send, h.size*n) // [m'][l_s]
	if x.ok() {
		h.moveBlocks(x, byNode, fromLocals, n, func(l, m int) int { return (m*G + l) * n }, func(l, m int) int { return (l*N + m) * n })
	}
	fromNodes := x.alloc(send, h.size*n) // [m_s][l_s]: from (m_s, l_s)
	x.do(h.railPart(), comm.Call{Kind: comm.KindAllToAll, Send: byNode, Recv: fromNodes})
	if x.ok() {
		h.moveBlocks(x, recv, fromNodes, n, func(l, m int) int { return h.rankAt(m, l) * n }, func(l, m int) int { return (m*G + l) * n })
	}
}

// barrier: the ranks of each node meet, then the leads, then each node
// again, so no rank leaves before every rank arrived.
func (h *Comm) barrier(x *phases) {
	x.do(h.intraPart(), comm.Call{Kind: comm.KindBarrier})
	if h.local == 0 {
		x.do(h.railPart(), comm.Call{Kind: comm.KindBarrier})
	}
	x.do(h.intraPart(), comm.Call{Kind: comm.KindBarrier})
}
