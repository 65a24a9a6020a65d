package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/bench"
	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/nexar"
	"github.com/hiercomm/hiercomm/shm"
	"github.com/hiercomm/hiercomm/topology"
)

// Names of the communicators a run measures.
const (
	commHier  = "hier"  // the hierarchical communicator
	commFlat  = "flat"  // its world part: nexar over every rank
	commSHM   = "shm"   // shared memory between the ranks of a node
	commNCCL  = "nccl"  // NCCL between the GPUs of a node
	commSmall = "small" // the hierarchy with every AllReduce on its latency path
	comm2D    = "2d"    // the hierarchy with every AllReduce on the 2D path
)

// -split's values, as NCCL_TESTS_SPLIT.
const (
	splitIntra = "intra" // within each node
	splitInter = "inter" // across nodes: local rank l of every node (a rail)
)

// layered is a hierarchical communicator as the bench asks it
// (hierarchy.Comm is one): its topology, its flat world part and its intra
// and rail parts.
type layered interface {
	comm.Communicator
	Topology() *topology.Topology
	Flat() comm.Communicator
	Parts() (intra, rail comm.Communicator)
	NodeP2PViaWorld() bool
}

// The hierarchy must stay layered, or the bench would measure it alone.
var _ layered = (*hierarchy.Comm)(nil)

// describe says what a communicator is, in words.
func describe(c comm.Communicator, network string) string {
	switch c := c.(type) {
	case *shm.Comm:
		return "shared memory between the processes of a node"
	case *nexar.Comm:
		return "nexar over " + network
	case layered:
		intra, rail := c.Parts()
		return fmt.Sprintf("hierarchical: %s, and %s between nodes (one rail per local rank)", describe(intra, network), describe(rail, network))
	}
	return fmt.Sprintf("%T", c)
}

// launcherName says who started this rank.
func launcherName(o options) string {
	get := os.Getenv
	switch {
	case o.stream != "":
		return "this program as a local emulated cluster"
	case cluster.IsLocalChild():
		return "`hiercomm run`"
	case get(launchenv.EnvK8sService) != "":
		return "Kubernetes"
	case get(launchenv.EnvRank) != "" || get(launchenv.EnvWorldSize) != "":
		return "a torchrun-style environment (RANK, WORLD_SIZE, MASTER_ADDR)"
	case get(launchenv.EnvSlurmProcID) != "":
		return "Slurm (srun)"
	}
	return "an unknown launcher"
}

// measureWorld runs the Spec on this rank's World. What it measures: with
// -split, the communicator within each node or across nodes alone; with
// -impl or -compare, the communicators named; otherwise a hierarchical
// World against its flat world part, interleaved on the same processes
// (then, with -switch, the hierarchy's two AllReduce paths against each
// other), and anything else alone. Rank 0 reports to to (nil elsewhere).
func measureWorld(ctx context.Context, w *hiercomm.World, o options, spec bench.Spec, to sink, log *slog.Logger) (bench.Result, error) {
	topo, rank := w.Topology(), w.Rank()
	network := o.cfg.Network
	if n := os.Getenv(launchenv.EnvNetwork); n != "" {
		network = n
	}
	h, isLayered := w.Communicator.(layered)
	var world, intra, rail comm.Communicator = w.Communicator, nil, nil
	var hier comm.Communicator
	if isLayered {
		world = h.Flat()
		intra, rail = h.Parts()
		hier = h
	}
	// The node-mates' route the bench's Init took (HIERCOMM_NODE_P2P, or
	// the crowded hosts' rule).
	viaWorld := isLayered && h.NodeP2PViaWorld()
	// variant is a hierarchy over the same parts with another SmallBytes.
	// It shares them with h (which owns and closes them) and is used only
	// while h is not, so it is never closed.
	variant := func(small int) (comm.Communicator, error) {
		return hierarchy.New(hierarchy.Config{Topology: topo, Rank: rank, World: world, Intra: intra, Rail: rail, SmallBytes: small, Name: "hierarchy(bench)",
			NodeP2PViaWorld: viaWorld})
	}
	info := runInfo{Launcher: launcherName(o), Ranks: w.Size(), Nodes: topo.NumNodes(), Network: network, Split: o.split,
		Topology: topo, Started: time.Now(), Links: os.Getenv(envLinks), Copy: parseCopy(os.Getenv(envCopy))}
	info.Conns, _ = strconv.Atoi(os.Getenv(launchenv.EnvConnsPerPeer)) // Init refused a bad value
	whatFlat := describe(world, network) + ", every rank"
	if isLayered {
		whatFlat += " (the hierarchy's own flat world)"
	}
	whatHier := describe(w.Communicator, network)
	if viaWorld {
		why := "more processes than cores share a host; HIERCOMM_NODE_P2P=intra keeps them in the node"
		if os.Getenv(launchenv.EnvNodeP2P) == "world" {
			why = "HIERCOMM_NODE_P2P=world"
		}
		whatHier += "; Send and Recv between node-mates over " + network + " too (" + why + ")"
	}
	switch o.limiter {
	case limitTBF:
		spec.Traffic = nicCounter(fmt.Sprintf("nic%d", topo.LocalRank(rank)))
	case limitWrapper:
		bits, err := linkBits(o.cfg.LinkRate)
		if err != nil {
			return bench.Result{}, err
		}
		info.LinkBits = bits
		link, err := bench.NewLink(bits)
		if err != nil {
			return bench.Result{}, err
		}
		node := topo.NodeOf(rank)
		world = link.Wrap(world, func(peer int) bool { return topo.NodeOf(peer) == node })
		if isLayered {
			rail = link.Wrap(rail, nil)
			if hier, err = variant(0); err != nil {
				return bench.Result{}, err
			}
		}
		spec.Traffic = func() (int64, error) { return link.Sent(), nil }
	}
	if o.limiter == limitTBF {
		info.LinkBits, _ = linkBits(o.cfg.LinkRate)
	}

	// What to measure.
	var cts []bench.Contender
	var infos []commInfo
	pick := func(name string) error {
		var c comm.Communicator
		var what string
		switch {
		case name == commHier && isLayered:
			c, what = hier, whatHier
		case name == commFlat && (isLayered || isNexar(w.Communicator)):
			c, what = world, whatFlat
		case name == commSHM && isSHM(w.Communicator):
			c, what = w.Communicator, describe(w.Communicator, network)
		case name == commNCCL:
			return errors.New("-impl nccl: the bench measures host memory and NCCL needs device buffers; measure the GPU tier with examples/gpu (docs/gpu.md)")
		default:
			return fmt.Errorf("this world has no %q communicator: hiercomm.Init returned %s on %d node(s)", name, whatHier, topo.NumNodes())
		}
		cts = append(cts, bench.Contender{Name: name, Comm: c})
		infos = append(infos, commInfo{Name: name, What: what})
		return nil
	}
	switch {
	case o.split != "":
		part, what, owned, err := splitPart(ctx, w, o.split, intra, rail, network)
		if err != nil {
			return bench.Result{}, err
		}
		if owned {
			defer part.Close()
		}
		cts, infos = []bench.Contender{{Name: o.split, Comm: part}}, []commInfo{{Name: o.split, What: what}}
	case o.impl == commSHM && isLayered:
		// Shared memory is the within-node part of a hierarchy.
		cts, infos = []bench.Contender{{Name: commSHM, Comm: intra}}, []commInfo{{Name: commSHM, What: describe(intra, network) + ", within each node (the rows are node 0's)"}}
	case o.impl != "":
		if err := pick(o.impl); err != nil {
			return bench.Result{}, err
		}
	case len(o.compare) > 0:
		for _, name := range o.compare {
			if err := pick(name); err != nil {
				return bench.Result{}, err
			}
		}
	case isLayered:
		pick(commHier)
		pick(commFlat)
	default:
		if (o.limiter == limitWrapper || o.limiter == limitTBF) && rank == 0 {
			log.Warn("the world is not hierarchical (one node, or one rank per node): measuring it alone")
		}
		name := ""
		switch {
		case isNexar(w.Communicator):
			name = commFlat
		case isSHM(w.Communicator):
			name = commSHM
		}
		cts, infos = []bench.Contender{{Name: name, Comm: world}}, []commInfo{{Name: name, What: describe(w.Communicator, network)}}
	}
	info.Comms, info.Measured = infos, cts[0].Comm.Size()
	if len(cts) >= 2 && cts[0].Name == commHier && cts[1].Name == commFlat {
		// The sizes where the hierarchy might lose to flat get the repeats
		// that tell a loss from noise (bench.Spec.Settle).
		spec.Settle = bench.HierNeverLoses
	}
	if len(cts) >= 2 {
		// Every contender's repeats start at the flat world's Barrier, so
		// that none is timed from a Barrier that releases its ranks
		// differently (bench.Spec.Sync).
		spec.Sync = world
		for i := range infos {
			if infos[i].Name == commFlat {
				infos[i].What += "; its Barrier starts every timed repeat of each communicator"
			}
		}
	}
	full, err := spec.Filled(info.Measured)
	if err != nil {
		return bench.Result{}, err
	}
	info.Spec = full
	if o.split == "" {
		raw, err := measureRaw(ctx, world, topo, network, log)
		if err != nil {
			return bench.Result{}, fmt.Errorf("measuring the bare transport: %w", err)
		}
		info.Raw = raw
		if network == "quic" || network == "tcp" {
			a, b := measuredPair(topo)
			floor, err := measureFloor(ctx, world, topo, a, b, log)
			if err != nil {
				return bench.Result{}, fmt.Errorf("measuring the machine's floor: %w", err)
			}
			info.Floor = floor
		}
	}
	if to != nil {
		to.start(info)
		spec.Progress = to.row
	}
	res, err := bench.RunCompare(ctx, cts, spec)
	info.fill(&res)
	if err != nil || o.cfg.SwitchFrom == 0 || !isLayered || o.split != "" || !slices.ContainsFunc(cts, func(c bench.Contender) bool { return c.Name == commHier }) {
		return res, err
	}
	small, err := variant(math.MaxInt32)
	if err != nil {
		return res, err
	}
	twoD, err := variant(-1)
	if err != nil {
		return res, err
	}
	sw := spec
	sw.Ops, sw.MinBytes, sw.MaxBytes, sw.Factor, sw.StepBytes = []string{"allreduce"}, int64(o.cfg.SwitchFrom), int64(o.cfg.SwitchTo), 2, 0
	sw.Progress, sw.InPlace = nil, false
	if to != nil {
		steps, _ := sw.Plan(w.Size())
		to.phase(fmt.Sprintf("the hierarchy's AllReduce paths, %s–%s", bench.FormatSize(sw.MinBytes), bench.FormatSize(sw.MaxBytes)), 2*len(steps))
	}
	swRes, err := bench.RunCompare(ctx, []bench.Contender{{Name: commSmall, Comm: small}, {Name: comm2D, Comm: twoD}}, sw)
	res.Switch = &swRes
	return res, err
}

func isNexar(c comm.Communicator) bool { _, ok := c.(*nexar.Comm); return ok }
func isSHM(c comm.Communicator) bool   { _, ok := c.(*shm.Comm); return ok }

// splitPart is the communicator -split measures: within each node
// (intra) or across nodes, local rank l of every node (inter). A
// hierarchy has them as parts; another world is split by its topology
// (owned: the caller closes the new communicator).
func splitPart(ctx context.Context, w *hiercomm.World, split string, intra, rail comm.Communicator, network string) (part comm.Communicator, what string, owned bool, err error) {
	col := w.Topology().Colors(w.Rank())
	part, color, key, what := rail, col.Rail, col.RailKey, ", one rank per node (every rail measures at once; the rows are rail 0's)"
	if split == splitIntra {
		part, color, key, what = intra, col.Intra, col.IntraKey, ", the ranks of one node (every node measures at once; the rows are node 0's)"
	}
	if part == nil {
		if part, err = w.Split(ctx, color, key); err != nil {
			return nil, "", false, fmt.Errorf("-split %s: %w", split, err)
		}
		owned = true
	}
	return part, describe(part, network) + what, owned, nil
}

// reportComparison prints what a hierarchical run compared: hier against
// flat per operation, the goals, ReduceScatter's traffic, and the switch
// point of the AllReduce paths.
func reportComparison(w io.Writer, res bench.Result) error {
	if len(res.Comms) < 2 {
		return nil
	}
	fmt.Fprintf(w, "# Comparison: %s against %s, size by size, from the tables above\n#\n", commHier, commFlat)
	err := errors.Join(
		bench.FormatComparison(w, res, commHier, commFlat),
		bench.FormatGoals(w, bench.HierGoals(res, commHier, commFlat)),
		bench.FormatLosses(w, res, commHier, commFlat),
		bench.FormatTraffic(w, res, []string{commHier, commFlat}),
	)
	if res.Switch == nil || err != nil {
		return err
	}
	fmt.Fprintln(w, "# Where the hierarchy's AllReduce should switch from its latency path to its 2D path (the hierarchy rebuilt with each path forced):")
	if err := bench.FormatComparison(w, *res.Switch, comm2D, commSmall); err != nil {
		return err
	}
	if b, ok := bench.Crossover(*res.Switch, commSmall, comm2D); ok {
		fmt.Fprintf(w, "# crossover: the 2D path is as fast or faster from %s up (hierarchy.Config.SmallBytes ≈ %s)\n#\n", bench.FormatSize(b), bench.FormatSize(b/2))
	} else {
		fmt.Fprintf(w, "# crossover: none in %s–%s (the latency path wins at the largest size)\n#\n", bench.FormatSize(res.Switch.Spec.MinBytes), bench.FormatSize(res.Switch.Spec.MaxBytes))
	}
	return nil
}

// switchFlag is Config's switch range in -switch's syntax.
func switchFlag(c bench.Config) string {
	if c.SwitchFrom == 0 {
		return "off"
	}
	return bench.FormatSize(int64(c.SwitchFrom)) + "-" + bench.FormatSize(int64(c.SwitchTo))
}

// parseSwitch reads -switch: "FROM-TO" (sizes as -b takes them) or "off".
func parseSwitch(s string) (from, to int64, err error) {
	if s == "off" || s == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want FROM-TO (16K-1M) or off", s)
	}
	if from, err = bench.ParseSize(a); err != nil {
		return 0, 0, err
	}
	if to, err = bench.ParseSize(b); err != nil {
		return 0, 0, err
	}
	if from <= 0 || to < from {
		return 0, 0, fmt.Errorf("%q: want 0 < FROM ≤ TO", s)
	}
	return from, to, nil
}
