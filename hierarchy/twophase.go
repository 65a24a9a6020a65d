package hierarchy

import (
	"encoding/binary"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// The two-phase rooted and personalized exchanges: Gather, Scatter and
// AllToAllV move every block once within a node and once across nodes, in
// N-1 inter-node messages per rank of a rail instead of one per pair of
// ranks. Like every 2D path, their operations on each part depend only on
// the kind, never on the root or the counts (a rail with nothing to move
// takes part with empty buffers), so a rank whose call is rejected still
// issues its peers' operations.

// gather: every node gathers its ranks' blocks at the root's local rank
// lr, rail lr gathers the nodes' G-block pieces at the root's node (the
// other rails take part with empty buffers), and the root puts the blocks
// in rank order.
func (h *Comm) gather(x *phases, send, recv comm.Buffer, root int) {
	G, N := h.g, h.topo.NumNodes()
	mr, lr := h.topo.NodeOf(root), h.topo.LocalRank(root)
	n := send.Len()
	onRail := send.Slice(0, 0) // this node's blocks at lr, else nothing
	if h.local == lr {
		onRail = x.alloc(send, G*n)
	}
	var nodeRecv comm.Buffer
	if h.local == lr {
		nodeRecv = onRail
	}
	x.do(h.intraPart(), comm.Call{Kind: comm.KindGather, Send: send, Recv: nodeRecv, Root: lr})
	var all comm.Buffer // every block at the root, [m][l]
	if h.node == mr {
		all = send.Slice(0, 0)
		if h.local == lr {
			all = x.alloc(send, N*G*n)
		}
	}
	x.do(h.railPart(), comm.Call{Kind: comm.KindGather, Send: onRail, Recv: all, Root: mr})
	if h.rank == root && x.ok() {
		h.moveBlocks(x, recv, all, n, func(l, m int) int { return h.rankAt(m, l) * n }, func(l, m int) int { return (m*G + l) * n })
	}
}

// scatter is gather's inverse: the root puts its blocks in node order,
// rail lr scatters each node's G blocks to its member of the root's local
// rank, and every node scatters them from there.
func (h *Comm) scatter(x *phases, send, recv comm.Buffer, root int) {
	G, N := h.g, h.topo.NumNodes()
	mr, lr := h.topo.NodeOf(root), h.topo.LocalRank(root)
	n := recv.Len()
	var all comm.Buffer // the root's blocks, [m][l]
	if h.node == mr {
		all = recv.Slice(0, 0)
		if h.rank == root {
			all = x.alloc(recv, N*G*n)
			if x.ok() {
				h.moveBlocks(x, all, send, n, func(l, m int) int { return (m*G + l) * n }, func(l, m int) int { return h.rankAt(m, l) * n })
			}
		}
	}
	fromRail := recv.Slice(0, 0) // this node's blocks at lr, else nothing
	if h.local == lr {
		fromRail = x.alloc(recv, G*n)
	}
	x.do(h.railPart(), comm.Call{Kind: comm.KindScatter, Send: all, Recv: fromRail, Root: mr})
	var nodeSend comm.Buffer
	if h.local == lr {
		nodeSend = fromRail
	}
	x.do(h.intraPart(), comm.Call{Kind: comm.KindScatter, Send: nodeSend, Recv: recv, Root: lr})
}

// allToAllV is the two-phase AllToAllV: an intra AllToAll of the counts
// (what each rank of the node sends to each rank of every rail), an intra
// AllToAllV handing local rank l every block this node sends to rail l,
// and an AllToAllV on rail l delivering them node by node. Each message
// on the rail starts with the counts of the blocks it carries, so that a
// receiver whose RecvCounts disagree with a sender's SendCounts reports a
// mismatch naming the sender instead of misplacing data, even when the
// totals agree.
func (h *Comm) allToAllV(x *phases, c comm.Call) {
	G, N := h.g, h.topo.NumNodes()
	send, recv := c.Send, c.Recv
	dt := send.DType()
	sendAt, recvAt := tier.Offsets(c.SendCounts, 1), tier.Offsets(c.RecvCounts, 1)

	// Counts: cnt[l'·N + m'] = what this rank sends to (m', l'); after the
	// exchange, from[ls·N + m'] = what (this node, ls) sends to (m', l).
	// They travel as little-endian bytes in the memory of the caller's
	// buffers (the intra part may take device memory only).
	cnt, from := make([]int64, G*N), make([]int64, G*N)
	for l := range G {
		for m := range N {
			cnt[l*N+m] = int64(c.SendCounts[h.rankAt(m, l)])
		}
	}
	cntBuf := x.alloc(bytesLike(send), 8*G*N)
	fromBuf := x.alloc(bytesLike(send), 8*G*N)
	if x.ok() {
		x.local("staging the counts", h.cfg.Stager.Write(cntBuf, putCounts(make([]byte, 8*G*N), cnt)))
	}
	x.do(h.intraPart(), comm.Call{Kind: comm.KindAllToAll, Send: cntBuf, Recv: fromBuf})
	if x.ok() {
		raw := make([]byte, 8*G*N)
		if x.local("reading the counts", h.cfg.Stager.Read(raw, fromBuf)) {
			getCounts(from, raw)
		}
	}

	// Phase 1: to local rank l', every block for rail l', in node order.
	s1, r1 := make([]int, G), make([]int, G)
	for l := range G {
		for m := range N {
			s1[l] += int(cnt[l*N+m])
			r1[l] += int(from[l*N+m])
		}
	}
	byRail := x.alloc(send, sum(s1))
	if x.ok() {
		at := 0
	pack:
		for l := range G {
			for m := range N {
				r := h.rankAt(m, l)
				k := c.SendCounts[r]
				if !x.local("permuting blocks", h.cfg.Stager.Copy(byRail.Slice(at, k), send.Slice(sendAt[r], k))) {
					break pack
				}
				at += k
			}
		}
	}
	fromNode := x.alloc(send, sum(r1)) // [ls][m']
	x.do(h.intraPart(), comm.Call{Kind: comm.KindAllToAllV, Send: byRail, SendCounts: s1, Recv: fromNode, RecvCounts: r1})

	// Phase 2: to node m', a header of G counts (one per local source ls)
	// and the blocks from (this node, ls) to (m', l).
	head := 8 * G / dt.Size() // elements of dt the header takes
	s2, r2 := make([]int, N), make([]int, N)
	for m := range N {
		s2[m], r2[m] = head, head
		for l := range G {
			s2[m] += int(from[l*N+m])
			r2[m] += c.RecvCounts[h.rankAt(m, l)]
		}
	}
	if x.ok() {
		// The blocks this node's ranks send this rank travel in the rail's
		// message to this rank itself, which the rail checks as an argument
		// (it must fit): a disagreement there is a mismatch, said here.
		for l := range G {
			r := h.rankAt(h.node, l)
			if got, want := from[l*N+h.node], int64(c.RecvCounts[r]); got != want {
				x.mismatch(r, fmt.Sprintf("rank %d sends %d elements to rank %d, whose recvCounts[%d] is %d", r, got, h.rank, r, want))
				return
			}
		}
	}
	byNode := x.alloc(send, sum(s2))
	if x.ok() {
		h.packByNode(x, byNode, fromNode, from, head)
	}
	fromNodes := x.alloc(send, sum(r2)) // [ms]: header, then [ls] blocks
	x.do(h.railPart(), comm.Call{Kind: comm.KindAllToAllV, Send: byNode, SendCounts: s2, Recv: fromNodes, RecvCounts: r2})
	if !x.ok() {
		return
	}
	at := 0
	hdr := make([]byte, 8*G)
	for m := range N {
		if !x.local("reading a node's header", h.cfg.Stager.Read(hdr, fromNodes.Slice(at, head))) {
			return
		}
		at += head
		for l := range G {
			r := h.rankAt(m, l)
			k := c.RecvCounts[r]
			if got := int64(binary.LittleEndian.Uint64(hdr[8*l:])); got != int64(k) {
				x.mismatch(r, fmt.Sprintf("rank %d sends %d elements to rank %d, whose recvCounts[%d] is %d", r, got, h.rank, r, k))
				return
			}
			if !x.local("permuting blocks", h.cfg.Stager.Copy(recv.Slice(recvAt[r], k), fromNodes.Slice(at, k))) {
				return
			}
			at += k
		}
	}
}

// packByNode lays out phase 2's send buffer: per node m', the header of
// the G counts from[ls·N + m'], then those blocks, taken from fromNode
// ([ls][m'] as phase 1 delivered them).
func (h *Comm) packByNode(x *phases, byNode, fromNode comm.Buffer, from []int64, head int) {
	G, N := h.g, h.topo.NumNodes()
	// src[ls·N + m'] is where block (ls, m') starts in fromNode.
	src := make([]int, G*N)
	for i, off := 1, 0; i < G*N; i++ {
		off += int(from[i-1])
		src[i] = off
	}
	at := 0
	hdr := make([]byte, 8*G)
	for m := range N {
		for l := range G {
			binary.LittleEndian.PutUint64(hdr[8*l:], uint64(from[l*N+m]))
		}
		if !x.local("writing a node's header", h.cfg.Stager.Write(byNode.Slice(at, head), hdr)) {
			return
		}
		at += head
		for l := range G {
			k := int(from[l*N+m])
			if !x.local("permuting blocks", h.cfg.Stager.Copy(byNode.Slice(at, k), fromNode.Slice(src[l*N+m], k))) {
				return
			}
			at += k
		}
	}
}

// bytesLike is an empty u8 buffer in the memory b lives in: what
// Stager.Alloc takes to place bytes beside b.
func bytesLike(b comm.Buffer) comm.Buffer {
	if b.OnHost() {
		u, _ := comm.HostBytes(comm.U8, []byte{})
		return u
	}
	return comm.Device(0, 0, comm.U8, b.Device())
}

// putCounts writes counts into b, 8 bytes each, little-endian, and
// returns b.
func putCounts(b []byte, counts []int64) []byte {
	for i, v := range counts {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	}
	return b
}

// getCounts is putCounts' inverse.
func getCounts(counts []int64, b []byte) {
	for i := range counts {
		counts[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
}

func sum(xs []int) int {
	t := 0
	for _, v := range xs {
		t += v
	}
	return t
}
