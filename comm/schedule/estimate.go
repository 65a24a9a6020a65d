package schedule

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Collective names a collective whose time the model estimates.
type Collective uint8

const (
	// AllReduceOp is AllReduce of n bytes.
	AllReduceOp Collective = iota + 1
	// ReduceScatterOp is ReduceScatter of n bytes of input per rank.
	ReduceScatterOp
	// AllGatherOp is AllGather of n bytes of output per rank (Scatter and
	// Gather cost the same: each rank's n/p bytes to or from every rank).
	AllGatherOp
	// ReduceOp is Reduce of n bytes to one rank.
	ReduceOp
	// BroadcastOp is Broadcast of n bytes from one rank.
	BroadcastOp
)

func (c Collective) String() string {
	switch c {
	case AllReduceOp:
		return "AllReduce"
	case ReduceScatterOp:
		return "ReduceScatter"
	case AllGatherOp:
		return "AllGather"
	case ReduceOp:
		return "Reduce"
	case BroadcastOp:
		return "Broadcast"
	}
	return fmt.Sprintf("Collective(%d)", uint8(c))
}

// Estimate is the model's time, in seconds, of collective c of n bytes on
// p ranks, run by the algorithm the tier would pick. A message-passing
// tier runs the schedules of this package (the faster of Ring and
// Doubling for AllReduce; the fastest of Ring, Doubling and Halving for
// ReduceScatter, as CostModel.ReduceScatter picks; rings for AllGather;
// binomial trees for Reduce and Broadcast). A Direct tier runs shm's algorithms:
// AllReduce and Reduce in one step or two (OneStepReduce), the others in
// one step in which each rank stages its data and reads the others'.
func (m CostModel) Estimate(c Collective, n, p int) float64 {
	m = m.WithDefaults()
	if p <= 1 {
		return 0
	}
	N, P := float64(n), float64(p)
	if m.Direct {
		switch c {
		case AllReduceOp, ReduceOp:
			return min(m.oneStep(N, P), m.twoSteps(N, P))
		case ReduceScatterOp:
			return m.Time(1, N, (P-1)/P*N)
		case AllGatherOp:
			return m.Time(1, N/P+(P-1)/P*N, 0)
		case BroadcastOp:
			return m.Time(1, 2*N, 0)
		}
		panic(fmt.Sprintf("schedule: Estimate of %v", c))
	}
	depth := float64(bits.Len(uint(p - 1))) // ⌈log₂ p⌉
	switch c {
	case AllReduceOp:
		return min(m.allReduceTimes(n, p))
	case ReduceScatterOp:
		return min(m.reduceScatterTimes(n, p))
	case AllGatherOp:
		return m.Time(P-1, (P-1)/P*N, 0)
	case ReduceOp:
		return m.Time(depth, depth*N, depth*N)
	case BroadcastOp:
		return m.Time(depth, depth*N, 0)
	}
	panic(fmt.Sprintf("schedule: Estimate of %v", c))
}

// oneStep is a Direct AllReduce of N bytes on P ranks in one step: every
// rank stages its input, then reduces the whole message from every part.
func (m CostModel) oneStep(N, P float64) float64 {
	return m.Time(1, N, (P-1)*N)
}

// twoSteps is the Direct two-step AllReduce: every rank stages its input
// and reduces its 1/P of it from every part, then copies the others'
// reduced slices out.
func (m CostModel) twoSteps(N, P float64) float64 {
	return m.Time(2, N+(P-1)/P*N, (P-1)/P*N)
}

// OneStepReduce reports whether a Direct tier's AllReduce (or Reduce) of n
// bytes on p ranks is predicted no slower in one step than in two: the
// one step saves a step's latency and the copy-out, and pays for every
// rank reducing the whole message instead of its 1/p. On two ranks with
// equal copy and reduction rates it always does; on more, up to a size
// that grows with the latency.
func (m CostModel) OneStepReduce(n, p int) bool {
	m = m.WithDefaults()
	N, P := float64(n), float64(p)
	return m.oneStep(N, P) <= m.twoSteps(N, P)
}

// Route is the way a hierarchical communicator runs a collective.
type Route uint8

const (
	// Leads: the whole message crosses nodes on one rail (the leads', or
	// the root's), with the node steps around it whole (Reduce to the
	// lead, Broadcast from it): fewest messages, one busy rank per node.
	Leads Route = iota + 1
	// TwoD: each node step splits the message over its ranks
	// (ReduceScatter, Scatter) so that every rail carries 1/g of it at
	// once, and a node step joins the pieces (AllGather, Gather): fewest
	// bytes per link, every rank busy.
	TwoD
)

func (r Route) String() string {
	switch r {
	case Leads:
		return "leads"
	case TwoD:
		return "2d"
	}
	return fmt.Sprintf("Route(%d)", uint8(r))
}

// Hierarchy is the cost model of a two-level communicator: one model for
// the tier inside a node (shared memory, NVLink), one for the rails
// between nodes, and how crowded the host's cores are. It picks each
// collective's route as CostModel picks a schedule: a pure function of
// its fields and arguments, so every rank given the same model picks the
// same route.
type Hierarchy struct {
	// Intra and Inter are the models of the node tier and of one rail;
	// each zero field takes its default.
	Intra, Inter CostModel
	// RanksPerCore is how many of the ranks sharing a host share each of
	// its cores (the host's ranks ÷ its cores). Where it exceeds 1, ranks
	// that communicate at once slow each other (CostModel.Shared): the
	// leads route keeps g−1 of every g ranks idle between nodes, the 2D
	// route does not. Zero or below 1: a core per rank.
	RanksPerCore float64
	// Wake is what each step of a phase costs on top of its latency where
	// that phase's ranks outnumber the cores (its share of RanksPerCore
	// above 1): a rank that waits for a step sleeps, and waking it means a
	// futex or network wake-up and a turn on a busy core. Shared's scaling
	// of the latency does not cover it: on 2 cores with 4 processes a
	// message between two processes of a node took 88–172 µs through
	// shared memory (4 µs with a core each), and the measured switch of
	// the hierarchy's Broadcast was 3 to 4 times what the model without
	// it predicted. Zero: none (hiercomm.Init sets DefaultWake).
	Wake time.Duration
}

// DefaultWake is the Wake hiercomm.Init gives a hierarchy's model: a
// process's wake-up on a crowded host, as measured on a 2-core VM with 4
// ranks (docs/hierarchy.md, "Choosing a route").
const DefaultWake = 100 * time.Microsecond

// Validate says what is wrong with h: a part model's error, or a negative
// RanksPerCore or Wake.
func (h Hierarchy) Validate() error {
	if err := h.Intra.Validate(); err != nil {
		return fmt.Errorf("intra-node %w", err)
	}
	if err := h.Inter.Validate(); err != nil {
		return fmt.Errorf("inter-node %w", err)
	}
	if !(h.RanksPerCore >= 0) {
		return fmt.Errorf("RanksPerCore %g is negative", h.RanksPerCore)
	}
	if h.Wake < 0 {
		return fmt.Errorf("a negative Wake (%v)", h.Wake)
	}
	return nil
}

// Estimate is the model's time, in seconds, of collective c of n bytes by
// route r on m nodes of g ranks. ReduceScatter and AllGather have only the
// 2D route; n is their per-rank input (ReduceScatter) or output
// (AllGather) over the whole world.
func (h Hierarchy) Estimate(c Collective, r Route, n, g, m int) float64 {
	all := h.crowded(h.Intra, h.RanksPerCore) // the node steps: every rank busy
	busy := h.crowded(h.Inter, h.RanksPerCore)
	lead := h.crowded(h.Inter, h.RanksPerCore/float64(max(1, g)))
	piece := n / max(1, g)
	switch {
	case r == Leads && c == AllReduceOp:
		return all.Estimate(ReduceOp, n, g) + lead.Estimate(AllReduceOp, n, m) + all.Estimate(BroadcastOp, n, g)
	case r == Leads && c == BroadcastOp:
		return lead.Estimate(BroadcastOp, n, m) + all.Estimate(BroadcastOp, n, g)
	case r == Leads && c == ReduceOp:
		return all.Estimate(ReduceOp, n, g) + lead.Estimate(ReduceOp, n, m)
	case r == TwoD && c == AllReduceOp:
		return all.Estimate(ReduceScatterOp, n, g) + busy.Estimate(AllReduceOp, piece, m) + all.Estimate(AllGatherOp, n, g)
	case r == TwoD && c == BroadcastOp:
		return all.Estimate(AllGatherOp, n, g) + busy.Estimate(BroadcastOp, piece, m) + all.Estimate(AllGatherOp, n, g)
	case r == TwoD && c == ReduceOp:
		return all.Estimate(ReduceScatterOp, n, g) + busy.Estimate(ReduceOp, piece, m) + all.Estimate(AllGatherOp, n, g)
	case r == TwoD && c == ReduceScatterOp:
		return all.Estimate(ReduceScatterOp, n, g) + busy.Estimate(ReduceScatterOp, piece, m)
	case r == TwoD && c == AllGatherOp:
		return busy.Estimate(AllGatherOp, piece, m) + all.Estimate(AllGatherOp, n, g)
	}
	panic(fmt.Sprintf("schedule: no %v route for %v", r, c))
}

// crowded is m for a phase whose ranks share each core f ways: Shared,
// and a wake-up per step where f exceeds 1.
func (h Hierarchy) crowded(m CostModel, f float64) CostModel {
	m = m.Shared(f)
	if f > 1 {
		m.Latency += h.Wake
	}
	return m
}

// Route picks the route of collective c (AllReduce, Broadcast or Reduce)
// of n bytes on m nodes of g ranks: Leads when it is predicted no slower
// than TwoD.
func (h Hierarchy) Route(c Collective, n, g, m int) Route {
	if h.Estimate(c, Leads, n, g, m) <= h.Estimate(c, TwoD, n, g, m) {
		return Leads
	}
	return TwoD
}

// Switch is the size, in bytes, from which collective c on m nodes of g
// ranks takes the TwoD route: below it, Leads. Near the point where the
// two routes cost the same, the model's piecewise minima (Ring or
// Doubling on each side) can make the predicted winner alternate over a
// few sizes; Switch makes the choice one threshold instead: the largest
// power of two up to 2⁴⁰ at which Leads is predicted faster bounds it
// below, and it is the first size above that at which TwoD is. 0: TwoD
// at every size; math.MaxInt: Leads at every size up to 2⁴⁰ and beyond.
func (h Hierarchy) Switch(c Collective, g, m int) int {
	const top = 40
	k := top
	for ; k >= 0 && h.Route(c, 1<<k, g, m) == TwoD; k-- {
	}
	switch {
	case k == top:
		return math.MaxInt
	case k < 0:
		if h.Route(c, 0, g, m) == TwoD {
			return 0
		}
		return 1
	}
	lo, hi := 1<<k, 1<<(k+1) // Leads at lo, TwoD at hi
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if h.Route(c, mid, g, m) == TwoD {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}
