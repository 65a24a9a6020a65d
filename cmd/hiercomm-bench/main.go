// Command hiercomm-bench is hiercomm's main job: it measures the
// collectives of a world the way nccl-tests does, with nccl-tests' flags,
// columns and footer, and prints the project's comparisons and speed-goal
// ratios after the tables.
//
// Started alone, it reads its embedded default (default.json: 4 ranks on 2
// emulated nodes over QUIC, allreduce, allgather, reducescatter,
// broadcast and sendrecv from 8 B to 64 MiB, results checked) and starts
// that many processes of itself with cluster.StartLocal (the local
// multi-node launcher of `hiercomm run`); each joins the job with
// hiercomm.Init and measures (hier.go). Rank 0 appends each row to a file
// as soon as it is measured (stream.go), and this process prints each
// operation's tables when its last row comes: the tables on stdout, logs
// and a status line (on a terminal) on stderr.
//
// Started by another launcher — torchrun's environment, Slurm's srun,
// Kubernetes, `hiercomm run` — it is one rank of that job: it joins with
// hiercomm.Init, and rank 0 prints. It exits 0 on success, 1 when a rank
// fails or a result is wrong, 2 on bad usage.
//
//	hiercomm-bench -np 2 -nodes 1 -network tcp -ops allreduce -b 1M -e 256M
//	torchrun --nproc-per-node 8 --nnodes 2 … hiercomm-bench -b 8 -e 1G -f 2
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/bench"
	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar"
)

//go:embed default.json
var defaultConfig string

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv)) }

// run is the whole command; it returns the exit status.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	o, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "hiercomm-bench: %v (see -h)\n", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return 2
	}
	con := newConsole(stdout, stderr)
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(con.stderr(), &slog.HandlerOptions{Level: level}))
	spec, err := o.cfg.Spec()
	if err != nil {
		fmt.Fprintf(stderr, "hiercomm-bench: %v (see -h)\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE)
	defer stop()
	if o.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(o.cfg.Timeout))
		defer cancel()
	}

	switch {
	case o.stream != "":
		// A rank of a local job this command started.
		if err := runRank(ctx, o, spec, nil, log); err != nil {
			log.Error("hiercomm-bench: rank failed", "err", err)
			return 1
		}
		return 0
	case launched(getenv):
		p := newPrinter(ctx, con, o, log)
		err := runRank(ctx, o, spec, p, log)
		if p.info == nil { // not rank 0, or it failed before the first row
			if err != nil {
				log.Error("hiercomm-bench: rank failed", "err", err)
				return 1
			}
			return 0
		}
		return p.finish(explain(ctx, o, err))
	case o.cfg.InProcess:
		p := newPrinter(ctx, con, o, log)
		return p.finish(explain(ctx, o, runInProcess(ctx, o, spec, p, log)))
	}
	p := newPrinter(ctx, con, o, log)
	return p.finish(runProcesses(ctx, o, args, con, p, log))
}

// launched reports whether a launcher started this process as one rank of
// a job: torchrun (RANK, WORLD_SIZE), Slurm's srun (SLURM_PROCID within a
// job step: a batch script alone is not a rank), Kubernetes
// (HIERCOMM_K8S_SERVICE) or `hiercomm run` (its inherited sockets).
func launched(getenv func(string) string) bool {
	set := func(name string) bool { return strings.TrimSpace(getenv(name)) != "" }
	return set(launchenv.EnvRank) || set(launchenv.EnvWorldSize) || set(launchenv.EnvK8sService) ||
		(set(launchenv.EnvSlurmProcID) && set("SLURM_STEP_ID")) || getenv(launchenv.EnvLauncherSockets) == "1"
}

// explain turns the end of a run by its context into words.
func explain(ctx context.Context, o options, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("the run took longer than -timeout %v and was stopped; raise -timeout or measure less (-e, -ops): %w", time.Duration(o.cfg.Timeout), err)
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted, and the ranks were stopped (%w)", err)
	}
	return err
}

// runProcesses starts the ranks as child processes of this program (the
// same arguments, plus where rank 0 streams its rows) and takes the rows
// as they come (the printer prints each operation's tables when it ends);
// it returns when every rank has exited.
func runProcesses(ctx context.Context, o options, args []string, con *console, p *printer, log *slog.Logger) error {
	f, err := os.CreateTemp("", "hiercomm-bench-*.jsonl")
	if err != nil {
		return err
	}
	path := f.Name()
	f.Close()
	defer os.Remove(path)

	nodes := max(o.cfg.Nodes, 1)
	layout := make([]int, nodes)
	for n := range layout {
		layout[n] = o.cfg.Ranks / nodes
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// The memory ceiling the intra-node goals are judged against, measured
	// before the job starts so nothing competes with it; the ranks get it
	// in their environment.
	copyRows := bench.MeasureCopy(bench.CopySizes, 5)
	lim, err := chooseLimiter(ctx, o.cfg.LinkRate, o.limiter, layout, log)
	if err != nil {
		return err
	}
	// The fabric goes when this function returns: after the job has
	// ended, whether it failed or was interrupted (ctx ends on SIGINT and
	// SIGTERM, which stops the job).
	defer lim.close(log)
	log.Info("starting local job", "ranks", o.cfg.Ranks, "nodes", nodes, "network", o.cfg.Network)
	start := time.Now()
	childArgs := append(append([]string(nil), args...), "-limiter", lim.kind, "-stream", path)
	spec := cluster.LocalSpec{
		RanksPerNode: layout, Network: o.cfg.Network, Path: exe, Args: childArgs,
		Stdout: con.stderr(), Stderr: con.stderr(),
		Env: []string{envCopy + "=" + formatCopy(copyRows), envLinks + "=" + lim.describe},
	}
	if o.cfg.Conns > 0 {
		spec.Env = append(spec.Env, fmt.Sprintf("%s=%d", launchenv.EnvConnsPerPeer, o.cfg.Conns))
	}
	if lim.fabric != nil {
		spec.Fabric = lim.fabric
	}
	job, err := cluster.StartLocal(ctx, spec)
	if err != nil {
		return err
	}
	stopTail := make(chan struct{})
	tailErr := make(chan error, 1)
	go func() { tailErr <- tail(path, p, stopTail) }()
	err = job.Wait()
	close(stopTail)
	if terr := <-tailErr; err == nil {
		err = terr
	}
	if err != nil {
		err = explain(ctx, o, err)
		if ctx.Err() == nil {
			err = fmt.Errorf("local job: %w; the ranks' logs above say why", err)
		}
		return err
	}
	if p.res == nil {
		return errors.New("local job: every rank exited cleanly but rank 0 sent no result")
	}
	log.Info("local job done", "elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// Variables a parent hands its ranks: its copy() measurement and how it
// limited the links, for rank 0's header.
const (
	envCopy  = "HIERCOMM_BENCH_COPY"
	envLinks = "HIERCOMM_BENCH_LINKS"
)

// formatCopy and parseCopy write and read copy() rows as "bytes:GB/s,…".
func formatCopy(rows []bench.CopyRow) string {
	var parts []string
	for _, r := range rows {
		parts = append(parts, fmt.Sprintf("%d:%g", r.Bytes, r.GBs))
	}
	return strings.Join(parts, ",")
}

func parseCopy(s string) []bench.CopyRow {
	var out []bench.CopyRow
	for part := range strings.SplitSeq(s, ",") {
		var r bench.CopyRow
		if _, err := fmt.Sscanf(part, "%d:%g", &r.Bytes, &r.GBs); err == nil {
			out = append(out, r)
		}
	}
	return out
}

// runRank is one rank of a job: it joins with hiercomm.Init and measures.
// Rank 0 reports to its sink: to (a printer) when a launcher started this
// process, else the parent's stream file (-stream).
func runRank(ctx context.Context, o options, spec bench.Spec, to sink, log *slog.Logger) error {
	nopt := nexar.Options{Logger: log}
	if bits, _ := linkBits(o.cfg.LinkRate); o.stream != "" && o.limiter != limitNone && bits > 0 {
		// This bench limits the links of its own local job: the cost
		// model that picks algorithms and routes (schedule.CostModel) is
		// told their rate, as it would be a real NIC's.
		nopt.Cost.BytesPerSec = float64(bits) / 8
	}
	w, err := hiercomm.Init(ctx, hiercomm.Options{Logger: log, Nexar: nopt})
	if err != nil {
		return fmt.Errorf("joining the job: %w", err)
	}
	var fs *fileSink
	if w.Rank() == 0 && o.stream != "" {
		if fs, err = newFileSink(o.stream); err != nil {
			w.Close()
			return err
		}
		to = fs
	}
	if w.Rank() != 0 {
		to = nil
	}
	res, err := measureWorld(ctx, w, o, spec, to, log)
	if cerr := w.Close(); err == nil && cerr != nil && !errors.Is(cerr, comm.ErrClosed) {
		log.Warn("closing the communicator", "err", cerr)
	}
	if err == nil && to != nil {
		to.done(res)
	}
	if fs != nil {
		if cerr := fs.close(); err == nil {
			err = cerr
		}
	}
	return err
}

// runInProcess runs every rank as a goroutine of this process, over one
// flat nexar world.
func runInProcess(ctx context.Context, o options, spec bench.Spec, to sink, log *slog.Logger) error {
	cfg := o.cfg
	opt := nexar.Options{Logger: log}
	var comms []*nexar.Comm
	var err error
	if cfg.Network == "memory" {
		comms, err = nexar.NewMemoryWorld(cfg.Ranks, opt)
	} else {
		comms, err = nexar.NewLocalWorld(ctx, cfg.Ranks, cfg.Network, opt)
	}
	if err != nil {
		return err
	}
	defer nexar.CloseAll(comms)
	full, err := spec.Filled(cfg.Ranks)
	if err != nil {
		return err
	}
	to.start(runInfo{
		Launcher: "this program, as goroutines of one process", Ranks: cfg.Ranks, Measured: cfg.Ranks, Network: cfg.Network,
		Comms: []commInfo{{Name: "", What: fmt.Sprintf("nexar over %s, every rank (a flat world: no membership, shared memory or hierarchy)", cfg.Network)}},
		Spec:  full, Started: time.Now(),
	})
	results := make([]bench.Result, len(comms))
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		sp := spec
		if r == 0 {
			sp.Progress = to.row
		}
		wg.Go(func() { results[r], errs[r] = bench.Run(ctx, c, sp) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	to.done(results[0])
	return nil
}
