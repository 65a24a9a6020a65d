package hierarchy

import (
	"github.com/hiercomm/hiercomm/comm"
)

// scan is the 2D Scan and ExScan of node-major ranks (rank m·G + l is
// local rank l of node m, so a prefix in rank order is the prefix of the
// nodes before this one and the prefix within it): an intra Scan (ExScan)
// gives each rank its prefix within the node; the last local rank's node
// total goes into an ExScan on rail G-1, which gives it the total of the
// nodes before; an intra Broadcast hands that to the node, and each rank
// combines it with its own prefix. Nodes other than the first combine;
// rank 0 of every node takes the nodes' prefix as it is for ExScan (no
// identity is ever combined, so a −0 or a NaN payload survives as in a
// sequential prefix). Floating-point sums round as (nodes before) op
// (prefix within the node), not in rank order: exact where the values
// are, like every 2D reduction.
func (h *Comm) scan(x *phases, send, recv comm.Buffer, op comm.ReduceOp, exclusive bool) {
	G := h.g
	kind := comm.KindScan
	if exclusive {
		kind = comm.KindExScan
	}
	last := h.local == G-1
	own := send // the last rank's own elements, for its node total in ExScan
	if exclusive && last && comm.SameMemory(send, recv) {
		own = x.alloc(send, send.Len())
		if x.ok() {
			x.local("keeping the elements an in-place ExScan overwrites", h.cfg.Stager.Copy(own, send))
		}
	}
	x.do(h.intraPart(), comm.Call{Kind: kind, Send: send, Recv: recv, Op: op})
	before := x.alloc(send, send.Len()) // the nodes before this one, reduced
	if last {
		total := recv // Scan: the node's total is the last rank's prefix
		if exclusive {
			total = x.alloc(send, send.Len())
			if x.ok() && x.local("copying the node's prefix", h.cfg.Stager.Copy(total, recv)) {
				x.local("adding the last rank's own elements", h.cfg.Stager.Reduce(total, own, op))
			}
		}
		x.do(h.railPart(), comm.Call{Kind: comm.KindExScan, Send: total, Recv: before, Op: op})
	}
	// The first node's prefixes are complete, but it takes part with an
	// empty buffer, so that its ranks hear of a bad argument elsewhere.
	onNode := before
	if h.node == 0 {
		onNode = send.Slice(0, 0)
	}
	x.do(h.intraPart(), comm.Call{Kind: comm.KindBroadcast, Send: onNode, Recv: onNode, Root: G - 1})
	if h.node == 0 || !x.ok() {
		return
	}
	if exclusive && h.local == 0 {
		x.local("taking the nodes' prefix", h.cfg.Stager.Copy(recv, before))
		return
	}
	x.local("adding the nodes' prefix", h.cfg.Stager.Reduce(recv, before, op))
}
