package hiercomm

import (
	"cmp"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm/schedule"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/nexar"
	"github.com/hiercomm/hiercomm/nexar/transport/netmesh"
	"github.com/hiercomm/hiercomm/shm"
	"github.com/hiercomm/hiercomm/topology"
)

// A Plan is what Init builds for one rank, decided before anything is
// built: which tiers make up the World, the transports and their routes
// (with the sizes at which the cost models switch), the timeouts and the
// staging of device memory. NewPlan computes it from the launch, the
// topology every rank agrees on, this rank's GPU and the Options, and does
// no I/O; Init builds exactly what it says (build, in hiercomm.go), rank 0 writes it to
// the log at start (Info, one line per row of String), and World.Plan
// returns it. `hiercomm plan` prints one for a topology file without
// starting a job.
type Plan struct {
	// Rank and Size place this process in the world; Node, LocalRank and
	// LocalSize in its node; Nodes and RanksPerNode (by node) give the
	// world's shape.
	Rank, Size                 int
	Node, LocalRank, LocalSize int
	Nodes                      int
	RanksPerNode               []int
	// Style and JobID are the launch's (launchenv.Launch): where it came
	// from, and the job; empty where no launch was read (hiercomm plan).
	Style, JobID string
	// Layout is the communicator the World is: LayoutSingle, LayoutNode,
	// LayoutFlat or LayoutHierarchy.
	Layout Layout
	// GPU is the device ordinal whose memory the World moves, or -1: host
	// memory.
	GPU int
	// Intra is the tier among the ranks of a node: "shm", "nccl" (over
	// shared memory as its control), "nexar" (a split of the network
	// world); "" where no node has node-mates.
	Intra string
	// Network is the data plane between processes (launchenv.Launch.Network:
	// "quic", "quic-only", "tcp"), "memory" for a world of one, "" where
	// every rank is on one node and Intra carries everything.
	Network string
	// ConnsPerPeer is the data connections each rank opens to each other
	// (over TCP; QUIC has one); 0 without a network.
	ConnsPerPeer int
	// Staged says that device data between nodes goes through page-locked
	// host memory (a GPU world of several nodes).
	Staged bool
	// NodeP2P is the route of Send and Recv between node-mates of a
	// hierarchy: "intra", "world", or "world when crowded" (the world
	// where the most crowded host has more processes than cores); "" when
	// the World is not a hierarchy. NodeP2PBy is what chose it: the
	// launch ("HIERCOMM_NODE_P2P=world"), an option
	// ("Hierarchy.NodeP2PViaWorld", "Hierarchy.NodeP2PViaWorldWhenCrowded")
	// or "default" (the hosts' crowding on the host tier, NCCL's own route
	// on the GPU tier).
	NodeP2P, NodeP2PBy string
	// RanksPerCore is this host's processes per core (the local launcher's
	// HostProcs, else this node's ranks, ÷ runtime.NumCPU); a hierarchy
	// takes the largest over its ranks.
	RanksPerCore float64
	// Routes are the algorithm and route choices of the cost models of
	// the tiers this rank runs, each with the sizes where it switches.
	Routes []Route
	// Timeouts are the bounds every tier is given, in one vocabulary.
	Timeouts Timeouts
	// FlightRecorder is how many collectives each communicator keeps for
	// its flight recorder; 0: none.
	FlightRecorder int
}

// Layout names the shape of communicator a World is.
type Layout string

const (
	// LayoutSingle is a world of one process.
	LayoutSingle Layout = "single"
	// LayoutNode is one node with several ranks: shared memory (or NCCL)
	// carries everything.
	LayoutNode Layout = "node"
	// LayoutFlat is a flat network communicator: one rank per node, or
	// one node whose launch asked for the network (HIERCOMM_INTRA=nexar),
	// or a GPU world of single-GPU nodes.
	LayoutFlat Layout = "flat"
	// LayoutHierarchy is the 2D communicator: several nodes, several ranks
	// on some node.
	LayoutHierarchy Layout = "hierarchy"
)

// A Route is one tier's choice for one collective: Choice says which
// algorithm or route it takes over which sizes ("doubling below 64 KiB,
// ring from 64 KiB"), By what decided it.
type Route struct {
	Tier   string // "network (4 ranks)", "shm (4 ranks)", "hierarchy (2 × 4)"
	Op     string
	Choice string
	// By is ByCostModel where the tier's cost model chose, else the
	// option that was the model's given input ("Hierarchy.SmallBytes",
	// "Shm.SmallReduceBytes": the tier's decision takes it as the switch,
	// hierarchy.Config.Switch, shm.Config.OneStepReduce), or, for a
	// choice no model makes, the setting ("Shm.EagerBytes") or "default".
	By string
}

// ByCostModel is Route.By for a choice of the tier's cost model.
const ByCostModel = "cost model"

// Timeouts are the bounds a Plan gives the tiers: each tier's in the one
// vocabulary of tier.Timeouts, as the tier itself reports them
// (nexar.Config.Timeouts, shm.Config.Timeouts), and the membership's.
type Timeouts struct {
	// Join bounds the membership's forming (launchenv.Launch.JoinTimeout);
	// 0 for a world of one, which has no membership.
	Join time.Duration
	// Network are the network tier's (nexar): a world of one in memory
	// has only its Timeout; all zero where the Plan has no network.
	Network tier.Timeouts
	// Node are a node's shared memory's (shm), which carries the ranks of
	// a node (Intra "shm") or NCCL's control among them (Intra "nccl");
	// all zero where the Plan has none.
	Node tier.Timeouts
	// Detector is how long the membership's failure detector may take to
	// see a dead process (cluster.Detector.Bound for this world); 0 for a
	// world of one.
	Detector time.Duration
}

// NewPlan is the Plan of rank rank of the world t under launch l (after
// launchenv.Launch.Resolve) and opt: gpu is the device ordinal this rank
// runs the GPU tier on, or -1 (Init decides it by loading NCCL and asking
// the driver: the one step that is not pure). It does no I/O: a caller
// may ask what Init would build for any topology.
func NewPlan(l launchenv.Launch, t *topology.Topology, rank, gpu int, opt Options) (Plan, error) {
	if t == nil || rank < 0 || rank >= t.Size() {
		return Plan{}, fmt.Errorf("hiercomm.NewPlan: rank %d is not a rank of the topology", rank)
	}
	opt = opt.withDefaults(nil)
	p := Plan{
		Rank: rank, Size: t.Size(), Node: t.NodeOf(rank), LocalRank: t.LocalRank(rank), LocalSize: t.LocalSize(rank),
		Nodes: t.NumNodes(), Style: l.Style, JobID: l.JobID, GPU: gpu, FlightRecorder: opt.FlightRecorder,
	}
	for _, n := range t.Nodes() {
		p.RanksPerNode = append(p.RanksPerNode, len(n.Ranks))
	}
	p.RanksPerCore = ranksPerCore(l, p.LocalSize)
	l.Network = cmp.Or(l.Network, launchenv.DefaultNetwork)
	g, homogeneous := t.RanksPerNode()
	single := p.Size == 1 && !l.Inherited
	switch {
	case single:
		p.Layout, p.Network = LayoutSingle, "memory"
		if gpu >= 0 {
			p.Intra = "nccl"
		}
	case p.Nodes == 1 && (gpu >= 0 || l.Intra != "nexar") && p.Size > 1:
		p.Layout = LayoutNode
		p.Intra = "shm"
		if gpu >= 0 {
			p.Intra = "nccl"
		}
	case gpu >= 0 && p.Nodes == 1: // a world of one with the launcher's sockets
		p.Layout, p.Intra, p.Network = LayoutNode, "nccl", l.Network
	case gpu >= 0 && homogeneous && g == 1:
		p.Layout, p.Network, p.Staged = LayoutFlat, l.Network, true
	case p.Nodes > 1 && (g > 1 || !homogeneous):
		p.Layout, p.Network = LayoutHierarchy, l.Network
		p.Intra = "shm"
		switch {
		case gpu >= 0:
			p.Intra, p.Staged = "nccl", true
		case l.Intra == "nexar":
			p.Intra = "nexar"
		}
		cfg := opt.Hierarchy
		p.NodeP2PBy = nodeP2PRoute(&cfg, l, gpu < 0)
		switch {
		case cfg.NodeP2PViaWorld:
			p.NodeP2P = "world"
		case cfg.NodeP2PViaWorldWhenCrowded:
			p.NodeP2P = "world when crowded"
		default:
			p.NodeP2P = "intra"
		}
	default:
		p.Layout, p.Network = LayoutFlat, l.Network
	}
	if p.Network != "" && p.Network != "memory" {
		p.ConnsPerPeer = max(l.ConnsPerPeer, 1)
	}
	p.Routes = p.routes(l, t, opt)
	p.Timeouts = p.timeouts(l, opt)
	return p, nil
}

// timeouts are the bounds p's tiers get from l and opt (after
// withDefaults), each as the tier reports the config Init gives it.
func (p Plan) timeouts(l launchenv.Launch, opt Options) Timeouts {
	var t Timeouts
	switch p.Network {
	case "":
	case "memory":
		t.Network.Timeout = nexar.Config{Options: opt.Nexar}.Timeouts().Timeout
	default:
		t.Network = nexar.Config{Net: opt.netConfig(nexar.NetConfig{}), Options: opt.Nexar}.Timeouts()
	}
	if (p.Intra == "shm" || p.Intra == "nccl") && p.Layout != LayoutSingle {
		t.Node = opt.Shm.Timeouts()
	}
	if p.Layout != LayoutSingle {
		t.Join = cmp.Or(l.JoinTimeout, launchenv.DefaultJoinTimeout)
		t.Detector = opt.Detector.Bound(p.Size)
	}
	return t
}

// planSettings are the launch's settings that every rank's Plan is
// decided from alike, and so must be the same on every rank: membership
// compares them before the world forms (cluster.Config.Agree), so that a
// job whose processes were launched otherwise fails at once, naming the
// setting, instead of building communicators that never meet. gpu is
// this rank's GPU, or -1. With them go the FailureTimeouts the tiers get
// from opt (after withDefaults): a rank shows it is alive at a fraction
// of its own and judges its peers' silence by its own, so a rank given a
// longer one than its peers' would be declared failed while it runs.
func planSettings(l launchenv.Launch, gpu int, opt Options) []cluster.Setting {
	gpuTier := "off"
	if gpu >= 0 {
		gpuTier = "on"
	}
	return []cluster.Setting{
		{Name: launchenv.EnvNetwork, Value: cmp.Or(l.Network, launchenv.DefaultNetwork)},
		{Name: launchenv.EnvIntra, Value: cmp.Or(l.Intra, "auto")},
		{Name: launchenv.EnvNodeP2P, Value: l.NodeP2P},
		{Name: launchenv.EnvConnsPerPeer, Value: strconv.Itoa(max(l.ConnsPerPeer, 1))},
		{Name: "the GPU tier", Value: gpuTier},
		{Name: "the network's FailureTimeout (Options.FailureTimeout)",
			Value: nexar.Config{Net: opt.netConfig(nexar.NetConfig{})}.Timeouts().FailureTimeout.String()},
		{Name: "shared memory's FailureTimeout (Options.Shm.FailureTimeout, else Options.FailureTimeout)",
			Value: opt.Shm.Timeouts().FailureTimeout.String()},
	}
}

// routes is what the cost models of p's tiers choose, for the ranks each
// tier runs on.
func (p Plan) routes(l launchenv.Launch, t *topology.Topology, opt Options) []Route {
	var rs []Route
	network := func(n int, what string) {
		if n < 2 {
			return
		}
		m := opt.Nexar.Cost.WithDefaults()
		seg := cmp.Or(opt.Nexar.SegmentBytes, nexar.DefaultSegmentBytes)
		tier := fmt.Sprintf("%s (%d ranks)", what, n)
		rs = append(rs,
			Route{tier, "AllReduce", switches(func(b int) string { return m.AllReduce(b, n).String() }), ByCostModel},
			Route{tier, "ReduceScatter", switches(func(b int) string { return m.ReduceScatter(b, n).String() }), ByCostModel},
			Route{tier, "Broadcast", switches(func(b int) string { return m.Broadcast(b, n, seg).String() }), ByCostModel})
	}
	node := func(n int) {
		if n < 2 {
			return
		}
		cfg := opt.Shm
		cfg.Size = n
		tier := fmt.Sprintf("shm (%d ranks)", n)
		by := ByCostModel
		oneStep := func(b int) string {
			one, forced := cfg.OneStepReduce(b)
			if forced {
				by = "Shm.SmallReduceBytes"
			}
			if one {
				return "one step"
			}
			return "two steps"
		}
		rs = append(rs, Route{tier, "AllReduce", switches(oneStep), by})
		eager, eagerBy := cmp.Or(opt.Shm.EagerBytes, shm.DefaultEagerBytes), "default"
		if opt.Shm.EagerBytes != 0 {
			eagerBy = "Shm.EagerBytes"
		}
		if p.Layout == LayoutHierarchy {
			// connectIntraHost: a hierarchy's node parts run without.
			eager, eagerBy = -1, "default"
		}
		if eager > 0 {
			rs = append(rs, Route{tier, "Broadcast", fmt.Sprintf("eager (the root returns) up to %s, staged above", sizeName(eager)), eagerBy})
		} else {
			rs = append(rs, Route{tier, "Broadcast", "staged", eagerBy})
		}
	}
	switch p.Layout {
	case LayoutNode:
		if p.Intra == "shm" {
			node(p.Size)
		}
	case LayoutFlat:
		network(p.Size, p.Network)
	case LayoutHierarchy:
		switch p.Intra {
		case "shm":
			node(p.LocalSize)
		case "nexar":
			network(p.LocalSize, p.Network+" within the node")
		}
		rail := len(t.Rails()[p.LocalRank])
		network(rail, p.Network+" rail")
		g, _ := t.RanksPerNode()
		cfg := hierarchyConfig(opt, p.intraCost(opt), l, t, p.Rank, p.GPU < 0)
		tier := fmt.Sprintf("hierarchy (%d nodes, up to %d ranks each)", p.Nodes, g)
		for _, c := range []schedule.Collective{schedule.AllReduceOp, schedule.BroadcastOp, schedule.ReduceOp} {
			at, forced := cfg.Switch(c, g, p.Nodes)
			by := ByCostModel
			if forced {
				by = "Hierarchy.SmallBytes"
			}
			rs = append(rs, Route{tier, c.String(), switchName(at), by})
		}
	}
	return rs
}

// switchName says where a hierarchy's route switches from the leads to
// 2D (schedule.Hierarchy.Switch).
func switchName(at int) string {
	switch at {
	case 0:
		return "2d"
	case math.MaxInt:
		return "leads"
	}
	return fmt.Sprintf("leads below %s, 2d from %s", sizeName(at), sizeName(at))
}

// switches describes choose over sizes from 1 byte to 1 GiB: the choice
// and, at every change, the first size (in bytes, exact) of the next.
func switches(choose func(bytes int) string) string {
	const top = 30
	var b strings.Builder
	cur := choose(1)
	b.WriteString(cur)
	lo := 1
	for k := 1; k <= top; k++ {
		hi := 1 << k
		next := choose(hi)
		if next == cur {
			lo = hi
			continue
		}
		// The change lies in (lo, hi]: find its first size.
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if choose(mid) == cur {
				lo = mid
			} else {
				hi = mid
			}
		}
		next = choose(hi)
		fmt.Fprintf(&b, " below %s, %s from it", sizeName(hi), next)
		cur, lo = next, hi
	}
	return b.String()
}

// sizeName writes n bytes as a binary size where it is a whole one (64
// KiB), else in bytes.
func sizeName(n int) string {
	for _, u := range []struct {
		name  string
		shift uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// Via is the one-line account of the communicator the Plan builds, as
// rank 0's "world ready" line gives it.
func (p Plan) Via() string {
	switch p.Layout {
	case LayoutSingle:
		if p.Intra != "" {
			return "nccl"
		}
		return "memory"
	case LayoutNode:
		return p.Intra
	case LayoutFlat:
		if p.Staged {
			return p.Network + " between single-GPU nodes, staged through host memory"
		}
		return p.Network
	}
	via := fmt.Sprintf("hierarchy: %s within nodes, %s between", p.Intra, p.Network)
	if p.Staged {
		via += " (staged through host memory)"
	}
	return via
}

// String is the Plan as a table, one row a line, as rank 0 logs it.
func (p Plan) String() string {
	var b strings.Builder
	row := func(k, format string, args ...any) {
		fmt.Fprintf(&b, "%-15s %s\n", k, fmt.Sprintf(format, args...))
	}
	row("rank", "%d of %d: node %d of %d, local rank %d of %d", p.Rank, p.Size, p.Node, p.Nodes, p.LocalRank, p.LocalSize)
	row("nodes", "%s", nodeCounts(p.RanksPerNode))
	if p.Style != "" || p.JobID != "" {
		row("launch", "%s, job %s", cmp.Or(p.Style, "?"), cmp.Or(p.JobID, "?"))
	}
	if via := p.Via(); strings.HasPrefix(via, string(p.Layout)) {
		row("layout", "%s", via)
	} else {
		row("layout", "%s: %s", p.Layout, via)
	}
	memory := "host"
	if p.GPU >= 0 {
		memory = fmt.Sprintf("GPU %d", p.GPU)
	}
	row("memory", "%s", memory)
	if p.Network != "" && p.Network != "memory" {
		lanes := map[string]string{
			"quic":      fmt.Sprintf("QUIC, and TLS 1.3 over TCP for frames from %s", sizeName(netmesh.BulkFrameMin)),
			"quic-only": "QUIC",
			"tcp":       "TCP, unencrypted",
		}[p.Network]
		row("network", "%s: %s; %d TCP connection(s) per peer", p.Network, cmp.Or(lanes, "?"), p.ConnsPerPeer)
	}
	switch {
	case p.NodeP2P == "world when crowded" && p.RanksPerCore > 1:
		row("node p2p", "%s: the world here (more ranks than cores) (%s)", p.NodeP2P, p.NodeP2PBy)
	case p.NodeP2P == "world when crowded":
		row("node p2p", "%s: the intra part here, unless another host is (%s)", p.NodeP2P, p.NodeP2PBy)
	case p.NodeP2P != "":
		row("node p2p", "%s (%s)", p.NodeP2P, p.NodeP2PBy)
	}
	row("ranks per core", "%.2f (%d cores)", p.RanksPerCore, runtime.NumCPU())
	for i, r := range p.Routes {
		k := ""
		if i == 0 {
			k = "routes"
		}
		row(k, "%-44s %-13s %s (%s)", r.Tier, r.Op, r.Choice, r.By)
	}
	t := p.Timeouts
	var ts []string
	switch {
	case t.Network.FailureTimeout != 0:
		ts = append(ts, fmt.Sprintf("network: %v", t.Network))
	case t.Network.Timeout != 0:
		ts = append(ts, fmt.Sprintf("memory: operation %v", t.Network.Timeout))
	}
	if t.Node != (tier.Timeouts{}) {
		ts = append(ts, fmt.Sprintf("shared memory: %v", t.Node))
	}
	if t.Join != 0 {
		ts = append(ts, fmt.Sprintf("join %v, failure detector %v", t.Join, t.Detector))
	}
	row("timeouts", "%s", strings.Join(ts, "; "))
	if p.FlightRecorder > 0 {
		row("flight recorder", "the last %d collectives", p.FlightRecorder)
	} else {
		row("flight recorder", "off")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// nodeCounts writes ranks per node compactly: "2 × 4", or "4, 2, 3".
func nodeCounts(per []int) string {
	if len(per) == 0 {
		return "none"
	}
	same := true
	for _, n := range per {
		same = same && n == per[0]
	}
	if same {
		return fmt.Sprintf("%d × %d ranks", len(per), per[0])
	}
	s := make([]string, len(per))
	for i, n := range per {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ") + " ranks"
}
