package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hiercomm/hiercomm/bench"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/schedule"
	"github.com/hiercomm/hiercomm/internal/netemu"
	"github.com/hiercomm/hiercomm/nexar"
)

// simulation is -simulate's cluster: nodes × ranks per node, and its links.
type simulation struct {
	nodes, perNode int
	linkBits       uint64  // -sim-link, bits per second each way; 0: this run's fitted β
	intraBytes     float64 // -sim-intra, bytes per second; 0: 100 GB/s
}

// intraAlpha is the latency assumed within a node at scale (the run
// measures none that a model can use: its intra-node transport is shared
// memory behind the hierarchy).
const intraAlpha = 2e-6

// parseSimulate reads -simulate NODESxRANKS ("128x8").
func parseSimulate(s string) (nodes, perNode int, err error) {
	a, b, ok := strings.Cut(s, "x")
	if ok {
		nodes, err = strconv.Atoi(a)
		if err == nil {
			perNode, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || nodes < 1 || perNode < 1 || nodes*perNode > 1<<16 {
		return 0, 0, fmt.Errorf("%q: want NODESxRANKS with at most 65536 ranks, e.g. 128x8", s)
	}
	return nodes, perNode, nil
}

// parseBytesRate reads a rate in bytes per second with a GB/s or MB/s
// unit ("900GB/s"), or in bits as tc writes it ("400gbit").
func parseBytesRate(s string) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for _, u := range []struct {
		unit string
		mult float64
	}{{"gb/s", 1e9}, {"mb/s", 1e6}} {
		if v, ok := strings.CutSuffix(t, u.unit); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || f <= 0 {
				break
			}
			return f * u.mult, nil
		}
	}
	bits, err := netemu.ParseRate(s)
	if err != nil || bits == 0 {
		return 0, fmt.Errorf("%q: want a rate such as 900GB/s or 400gbit", s)
	}
	return float64(bits) / 8, nil
}

// writeSimulation prints the model fitted from this run, its error on this
// run's flat rows, and the predictions at the scale of sim.
func writeSimulation(ctx context.Context, w io.Writer, res bench.Result, info runInfo, sim simulation) error {
	flat := ""
	if info.names() != nil {
		flat = commFlat
	}
	var sendrecv []bench.Row
	for _, row := range res.Rows {
		if row.Op == "sendrecv" && row.Comm == flat {
			sendrecv = append(sendrecv, row)
		}
	}
	alpha, beta, ok := bench.FitAlphaBeta(sendrecv)
	if !ok {
		_, err := fmt.Fprintf(w, "# Simulation: needs this run's flat sendrecv from 4 KiB or less up to 1 MiB or more, to fit its model; add sendrecv to -ops\n#\n")
		return err
	}
	reduce := schedule.DefaultCost.ReduceBytesPerSec
	perNode := info.Ranks
	if t := info.Topology; t != nil {
		perNode, _ = t.RanksPerNode()
	}
	// Eight calls back to back, as the bench's timed loop runs them.
	local := bench.SimModel{Alpha: alpha, Beta: beta, IntraAlpha: alpha, IntraBeta: beta, ReduceBytesPerSec: reduce, RanksPerNode: perNode, Calls: 8}
	var b strings.Builder
	fmt.Fprintf(&b, "# Simulation: an alpha-beta model fitted from this run's flat sendrecv: %.1f us per message, %.4g GB/s per link",
		alpha*1e6, 1/beta/1e9)
	if cb, ok := bench.FitCacheBeta(sendrecv, alpha); ok {
		local.CacheBeta, local.CacheBytes = cb, bench.CacheBytes
		fmt.Fprintf(&b, " (%.4g GB/s for calls up to %d KiB, whose buffers stay in the caches)", 1/cb/1e9, bench.CacheBytes>>10)
	}
	if r := info.Raw; r != nil && r.BurstUS > 0 && r.BurstUS*1e-6 < alpha {
		// A message's α includes what its send costs the sender, which
		// the model now charges apart.
		o := r.BurstUS * 1e-6
		local.SendOverhead, local.Alpha, local.IntraAlpha = o, alpha-o, alpha-o
		fmt.Fprintf(&b, ", of which %.1f us its sender's (the frames sent back to back)", r.BurstUS)
	}
	fmt.Fprintf(&b, "; reduction at %.0f GB/s (nexar's cost model)\n", reduce/1e9)
	fmt.Fprintf(&b, "# Its error on this run: predicted / measured time per call of the flat communicator (out of place, 8 calls back to back), from the schedules nexar runs\n")
	rows, err := bench.ModelError(res, flat, local)
	if err != nil {
		return err
	}
	if err := bench.FormatModelError(&b, rows); err != nil {
		return err
	}
	if sp := bench.SelfSpread(res, flat); sp.Rows > 0 {
		fmt.Fprintf(&b, "# The run against itself: out of place and in place (one schedule, a copy apart) differ by more than 25%% at %d of %d sizes (the most %.2fx, %s at %d B); no model is closer than that at every size\n",
			sp.Beyond, sp.Rows, sp.Worst, sp.WorstOp, sp.WorstBytes)
	}
	if sim.nodes > 0 {
		if err := writeScale(&b, res, sim, alpha, beta, reduce); err != nil {
			return err
		}
		if err := checkAtScale(ctx, &b, sim.nodes*sim.perNode, res.Spec.DType); err != nil {
			return err
		}
	}
	b.WriteString("#\n")
	_, err = io.WriteString(w, b.String())
	return err
}

// writeScale predicts flat and hierarchical collectives at sim's scale.
func writeScale(b *strings.Builder, res bench.Result, sim simulation, alpha, beta, reduce float64) error {
	interBeta, how := beta, "this run's fitted rate"
	if sim.linkBits > 0 {
		interBeta, how = 8/float64(sim.linkBits), "-sim-link"
	}
	intraBytes := sim.intraBytes
	if intraBytes == 0 {
		intraBytes = 100e9
	}
	p := sim.nodes * sim.perNode
	es := res.Spec.DType.Size()
	flat := bench.SimModel{Alpha: alpha, Beta: interBeta, IntraAlpha: intraAlpha, IntraBeta: 1 / intraBytes, ReduceBytesPerSec: reduce, RanksPerNode: sim.perNode}
	inter := bench.SimModel{Alpha: alpha, Beta: interBeta, ReduceBytesPerSec: reduce}
	intra := bench.SimModel{Alpha: intraAlpha, Beta: 1 / intraBytes, IntraAlpha: intraAlpha, IntraBeta: 1 / intraBytes, ReduceBytesPerSec: reduce}
	// Where the hierarchy's AllReduce takes its 2D route, as its own cost
	// model (hierarchy.Config.Cost) decides under the same α and β.
	cost := func(m bench.SimModel) schedule.CostModel {
		return schedule.CostModel{Latency: time.Duration(m.Alpha * float64(time.Second)), BytesPerSec: 1 / m.Beta, ReduceBytesPerSec: reduce}
	}
	switchAt := int64(schedule.Hierarchy{Intra: cost(intra), Inter: cost(inter)}.Switch(schedule.AllReduceOp, sim.perNode, sim.nodes))
	fmt.Fprintf(b, "# At scale, predicted (one call alone): %d ranks, %d nodes of %d; between nodes %.1f us per message (fitted) and %.4g GB/s each way (%s); within a node %.0f us and %.4g GB/s (assumed)\n",
		p, sim.nodes, sim.perNode, alpha*1e6, 1/interBeta/1e9, how, intraAlpha*1e6, intraBytes/1e9)
	fmt.Fprintf(b, "# every rank's schedule run to completion by the simulator, every receive paired with its send\n")
	fmt.Fprintf(b, "# %10s  %13s  %10s  %10s  %10s  %10s  %9s  %12s  %12s\n", "size(B)", "op", "flat(us)", "flat busbw", "hier(us)", "hier busbw", "flat msgs", "flat across", "hier across")
	for _, size := range []int64{8, 4 << 10, 256 << 10, 16 << 20, 64 << 20} {
		for _, op := range bench.PredictOps {
			unit := int64(es)
			if op == "allgather" || op == "reducescatter" {
				unit *= int64(p)
			}
			bytes := size / unit * unit
			if bytes == 0 {
				continue
			}
			f, err := bench.PredictFlat(op, p, bytes, es, flat)
			if err != nil {
				return err
			}
			h, hAcross, err := bench.PredictHier(op, sim.nodes, sim.perNode, bytes, es, inter, intra, switchAt)
			if err != nil {
				return err
			}
			factor := bench.BusFactor(op, p)
			bw := func(sec float64) float64 { return float64(bytes) / sec / 1e9 * factor }
			fmt.Fprintf(b, "  %10d  %13s  %10.1f  %10.4g  %10.1f  %10.4g  %9d  %12d  %12d\n",
				bytes, op, f.Seconds*1e6, bw(f.Seconds), h*1e6, bw(h), f.Messages[0], f.MaxInterBytes(), hAcross)
		}
	}
	fmt.Fprintf(b, "# (msgs: frames rank 0 sends; across: the most bytes a rank sends to other nodes per call; the hierarchy's AllReduce takes its 2D route from %s, as its cost model picks)\n", sizeWords(switchAt))
	return nil
}

// checkAtScale runs the flat collectives on p ranks over nexar's
// in-memory transport, one goroutine per rank, with rank-distinct data
// checked against a sequential reference (bench.Spec.Check), both forms:
// the schedules the simulation timed, run for real at that scale. Each
// rank's block is two elements, so it is about the schedules, not the
// bytes.
func checkAtScale(ctx context.Context, w io.Writer, p int, dt comm.DType) error {
	start := time.Now()
	cs, err := nexar.NewMemoryWorld(p, nexar.Options{})
	if err != nil {
		return err
	}
	defer nexar.CloseAll(cs)
	size := int64(2 * dt.Size() * p)
	spec := bench.Spec{Ops: []string{"allreduce", "allgather", "reducescatter", "broadcast"}, MinBytes: size, MaxBytes: size,
		DType: dt, Warmup: 1, Iters: 1, Repeats: 1, Check: true, InPlace: true}
	results := make([]bench.Result, p)
	errs := make([]error, p)
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() { results[r], errs[r] = bench.Run(ctx, c, spec) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("running the schedules on %d ranks in memory: rank %d: %w", p, r, err)
		}
	}
	fmt.Fprintf(w, "# Run for real on %d ranks over nexar's in-memory transport (one goroutine per rank; %s, two elements per rank; both forms, rank-distinct data checked; %v):", p, sizeWords(size), time.Since(start).Round(time.Second))
	for _, row := range results[0].Rows {
		wrong := row.Wrong
		if row.InPlace != nil {
			wrong += row.InPlace.Wrong
		}
		fmt.Fprintf(w, " %s %d wrong;", row.Op, wrong)
	}
	fmt.Fprintln(w)
	return nil
}
