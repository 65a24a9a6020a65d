package hierarchy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/schedule"
)

// Route says, for logs (hiercomm's per-call trace), how this rank runs
// call: the route (whole on the world part; the leads', one rail between
// the node steps; 2D, every rail; or, for a Barrier, Gather, Scatter or
// scan, through the parts), then the operations it issues on
// its parts, in order, each with how that part runs it where the part can
// say (a Route method of its own). The operations come from a dry run of
// the algorithm, as a refused call's stand-in is computed: nothing is
// sent. Pipelined pieces of one kind on one part are counted, not listed.
func (h *Comm) Route(call comm.Call) string {
	route := "through the parts"
	switch call.Kind {
	case comm.KindAllReduce, comm.KindBroadcast, comm.KindReduce, comm.KindReduceScatter, comm.KindAllGather, comm.KindAllToAll, comm.KindAllToAllV:
		route = "2d"
	}
	switch {
	case h.flat:
		route = "flat"
	case !h.homogeneous && (call.Kind == comm.KindAllReduce || call.Kind == comm.KindBroadcast || call.Kind == comm.KindReduce || call.Kind == comm.KindBarrier):
		route = "leads (nodes of different sizes)"
	case call.Kind == comm.KindAllReduce && h.small(schedule.AllReduceOp, call.Send),
		call.Kind == comm.KindBroadcast && h.small(schedule.BroadcastOp, call.Send),
		call.Kind == comm.KindReduce && h.small(schedule.ReduceOp, call.Send):
		route = "leads"
	}
	if _, whole := h.onWorld(call); whole {
		route = "whole on the world part"
	}
	var ops []planOp
	var routes []string
	x := &phases{h: h, ctx: context.Background(), kind: call.Kind, sig: call.Signature(), abandoned: errRouteDryRun, dry: &ops, routes: &routes}
	h.dispatch(x, call)
	var b strings.Builder
	b.WriteString(route)
	for i := 0; i < len(routes); {
		j := i + 1
		for j < len(routes) && routes[j] == routes[i] {
			j++
		}
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(routes[i])
		if j-i > 1 {
			fmt.Fprintf(&b, " ×%d", j-i)
		}
		i = j
	}
	return b.String()
}

// errRouteDryRun is the abandonment Route's dry run carries: it makes the
// phases record their operations instead of starting them.
var errRouteDryRun = errors.New("hierarchy: a dry run for Route")

// partRoute is one operation of a dry run: the part, the call's kind, and
// how the part runs it, where it says (a Route method).
func partRoute(p part, c comm.Call) string {
	s := p.name + " " + c.Kind.String()
	if r, ok := p.c.(interface{ Route(comm.Call) string }); ok {
		s += " (" + r.Route(c) + ")"
	}
	return s
}
