package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/bench"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/topology"
)

// Names of the communicators a hierarchical run compares.
const (
	commHier  = "hier"  // the hierarchical communicator
	commFlat  = "flat"  // its world part: nexar over every rank
	commSmall = "small" // the hierarchy with every AllReduce on its latency path
	comm2D    = "2d"    // the hierarchy with every AllReduce on the 2D path
)

// layered is a hierarchical communicator as the bench asks it
// (hierarchy.Comm is one): its topology, its flat world part and its intra
// and rail parts.
type layered interface {
	comm.Communicator
	Topology() *topology.Topology
	Flat() comm.Communicator
	Parts() (intra, rail comm.Communicator)
}

// The hierarchy must stay layered, or the bench would measure it alone.
var _ layered = (*hierarchy.Comm)(nil)

// measureWorld runs the Spec on this rank's World. A hierarchical World is
// measured against its flat world part, interleaved on the same processes;
// then, with -switch, the hierarchy's two AllReduce paths against each
// other. Anything else is measured alone.
func measureWorld(ctx context.Context, w *hiercomm.World, o options, spec bench.Spec, log *slog.Logger) (bench.Result, error) {
	h, ok := w.Communicator.(layered)
	if !ok {
		if o.limiter == limitWrapper || o.limiter == limitTBF {
			log.Warn("the world is not hierarchical (one node, or one rank per node): measuring it alone", "via", fmt.Sprintf("%T", w.Communicator))
		}
		return bench.Run(ctx, w, spec)
	}
	topo, rank := h.Topology(), h.Rank()
	world := h.Flat()
	intra, rail := h.Parts()
	hier := comm.Communicator(h)
	// variant is a hierarchy over the same parts with another SmallBytes.
	// It shares them with h (which owns and closes them) and is used only
	// while h is not, so it is never closed.
	variant := func(small int) (comm.Communicator, error) {
		return hierarchy.New(hierarchy.Config{Topology: topo, Rank: rank, World: world, Intra: intra, Rail: rail, SmallBytes: small, Name: "hierarchy(bench)"})
	}
	switch o.limiter {
	case limitTBF:
		spec.Traffic = nicCounter(fmt.Sprintf("nic%d", topo.LocalRank(rank)))
	case limitWrapper:
		bits, err := linkBits(o.cfg.LinkRate)
		if err != nil {
			return bench.Result{}, err
		}
		link, err := bench.NewLink(bits)
		if err != nil {
			return bench.Result{}, err
		}
		node := topo.NodeOf(rank)
		world = link.Wrap(world, func(peer int) bool { return topo.NodeOf(peer) == node })
		rail = link.Wrap(rail, nil)
		if hier, err = variant(0); err != nil {
			return bench.Result{}, err
		}
		spec.Traffic = func() (int64, error) { return link.Sent(), nil }
	}
	res, err := bench.RunCompare(ctx, []bench.Contender{{Name: commHier, Comm: hier}, {Name: commFlat, Comm: world}}, spec)
	if err != nil || o.cfg.SwitchFrom == 0 {
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
	sw.Ops, sw.MinBytes, sw.MaxBytes, sw.Factor = []string{"allreduce"}, int64(o.cfg.SwitchFrom), int64(o.cfg.SwitchTo), 2
	sw.Progress = nil
	if rank == 0 {
		log.Info("measuring the AllReduce paths of the hierarchy", "from", bench.FormatSize(sw.MinBytes), "to", bench.FormatSize(sw.MaxBytes))
	}
	swRes, err := bench.RunCompare(ctx, []bench.Contender{{Name: commSmall, Comm: small}, {Name: comm2D, Comm: twoD}}, sw)
	res.Switch = &swRes
	return res, err
}

// reportComparison prints what a hierarchical run compared: hier against
// flat per operation, the goals, ReduceScatter's traffic, and the switch
// point of the AllReduce paths.
func reportComparison(w io.Writer, res bench.Result) error {
	if len(res.Comms) < 2 {
		return nil
	}
	err := errors.Join(
		bench.FormatComparison(w, res, commHier, commFlat),
		bench.FormatGoals(w, bench.HierGoals(res, commHier, commFlat)),
		bench.FormatTraffic(w, res, []string{commHier, commFlat}),
	)
	if res.Switch == nil || err != nil {
		return err
	}
	fmt.Fprintln(w, "# AllReduce switch point: the hierarchy's 2D path vs its latency path (hierarchy.Config.SmallBytes forced either way)")
	if err := bench.FormatComparison(w, *res.Switch, comm2D, commSmall); err != nil {
		return err
	}
	if b, ok := bench.Crossover(*res.Switch, commSmall, comm2D); ok {
		fmt.Fprintf(w, "# crossover: the 2D path is as fast or faster from %s up (SmallBytes ≈ %s)\n#\n", bench.FormatSize(b), bench.FormatSize(b/2))
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
