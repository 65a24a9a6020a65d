// Command hiercomm-bench is hiercomm's main job: it measures the
// collectives of a local world the way nccl-tests does and prints
// nccl-tests' tables and the project's speed-goal ratios.
//
// With no arguments it reads its embedded default (default.json: 4 ranks
// on 2 emulated nodes over QUIC, allreduce, allgather, reducescatter,
// broadcast and sendrecv from 8 B to 64 MiB, results checked), starts 4
// processes of itself with cluster.StartLocal (the local multi-node
// launcher of `hiercomm run`), and each joins the job with hiercomm.Init —
// memberlist membership, topology, QUIC mesh — and runs bench.Run; a
// hierarchical World is measured against its flat world part with
// bench.RunCompare, over inter-node links limited by -link-rate (emulated
// NICs with tbf when root, else a bench.Link wrapper; see limiter.go and
// hier.go). Rank 0 hands its result (every rank's is the same) back in a
// JSON file, and this process prints it: the tables on stdout, logs on
// stderr. It exits 0 on success, 1 when a rank fails or a result is wrong,
// 2 on bad usage.
//
// Flags override the default, and -config FILE overrides it with a JSON
// file of the same fields (flags still win):
//
//	hiercomm-bench -np 2 -nodes 1 -network tcp -ops allreduce -b 1M -e 256M
//	hiercomm-bench -inprocess -network memory -check=false
package main

import (
	"context"
	_ "embed"
	"encoding/json"
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
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar"
)

//go:embed default.json
var defaultConfig string

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// options is what the command line says beyond the Config.
type options struct {
	cfg     bench.Config
	jsonOut string // write the Result as JSON here
	verbose bool
	// limiter is set by the parent for its children: how the inter-node
	// links are limited ("tbf", "wrapper" or "none"; see limiter.go).
	limiter string
}

// run is the whole command; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if err != nil {
		log.Error("hiercomm-bench: bad arguments", "err", err)
		return 2
	}
	spec, err := o.cfg.Spec()
	if err == nil {
		err = spec.Validate(o.cfg.Ranks)
	}
	if err != nil {
		log.Error("hiercomm-bench: bad configuration", "err", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(o.cfg.Timeout))
		defer cancel()
	}

	var res bench.Result
	switch {
	case cluster.IsLocalChild():
		err = runChild(ctx, o, spec, log)
		if err != nil {
			log.Error("hiercomm-bench: rank failed", "err", err)
			return 1
		}
		return 0
	case o.cfg.InProcess:
		res, err = runInProcess(ctx, o.cfg, spec, log)
	default:
		res, err = runProcesses(ctx, o, args, stderr, log)
	}
	if err != nil {
		log.Error("hiercomm-bench: failed", "err", err)
		return 1
	}
	return report(res, o, stdout, log)
}

// parseArgs resolves the configuration: the embedded default, then the
// -config file, then the flags that were given.
func parseArgs(args []string, stderr io.Writer) (options, error) {
	var o options
	if err := bench.LoadConfig(strings.NewReader(defaultConfig), &o.cfg); err != nil {
		return o, fmt.Errorf("embedded default: %w", err) // a build bug
	}
	d := o.cfg
	fs := flag.NewFlagSet("hiercomm-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: hiercomm-bench [flags]\n\n"+
			"Measures hiercomm's collectives on a local world, nccl-tests style.\n"+
			"With no flags: %d processes over %s, %s, %s … %s.\n\n",
			d.Ranks, d.Network, strings.Join(d.Ops, ","), bench.FormatSize(int64(d.MinBytes)), bench.FormatSize(int64(d.MaxBytes)))
		fs.PrintDefaults()
	}
	configFile := fs.String("config", "", "JSON `file` with the fields of the embedded default; flags override it")
	np := fs.Int("np", d.Ranks, "number of ranks")
	nodes := fs.Int("nodes", d.Nodes, "number of emulated nodes the ranks are spread over (-np must be a multiple)")
	network := fs.String("network", d.Network, "transport: quic or tcp (memory with -inprocess)")
	ops := fs.String("ops", strings.Join(d.Ops, ","), "comma-separated operations: "+strings.Join(bench.OpNames(), ", "))
	minBytes := fs.String("b", bench.FormatSize(int64(d.MinBytes)), "smallest size (K, M, G suffixes)")
	maxBytes := fs.String("e", bench.FormatSize(int64(d.MaxBytes)), "largest size")
	factor := fs.Int("f", d.Factor, "size multiplication factor")
	dtype := fs.String("dtype", d.DType, "element type: f32 f64 f16 bf16 i8 u8 i32 u32 i64 u64")
	redop := fs.String("redop", d.RedOp, "reduction: sum prod min max avg")
	root := fs.Int("root", d.Root, "root of broadcast and reduce")
	warmup := fs.Int("w", d.Warmup, "warmup iterations per size (the -check run counts as one)")
	iters := fs.Int("iters", d.Iters, "timed iterations per repeat (0: as many as fit -budget)")
	repeats := fs.Int("repeats", d.Repeats, "timed repeats per size; the median is reported")
	budget := fs.Duration("budget", time.Duration(d.Budget), "time per repeat when -iters is 0")
	check := fs.Bool("check", d.Check, "verify every size's result with rank-distinct data (#wrong)")
	inProcess := fs.Bool("inprocess", d.InProcess, "run the ranks as goroutines of this process, as one flat nexar world (no hiercomm.Init: no membership, shared memory or hierarchy), over the in-memory transport with -network memory, else over loopback sockets")
	timeout := fs.Duration("timeout", time.Duration(d.Timeout), "bound on the whole run (0: none)")
	fs.StringVar(&o.jsonOut, "json", "", "also write the result as JSON to `file`")
	fs.BoolVar(&o.verbose, "v", false, "log every measured row and the transport's debug events")
	linkRate := fs.String("link-rate", d.LinkRate, "limit each inter-node link to this rate each way (1gbit, 500mbit): tbf on emulated NICs when root, else a wrapper; \"off\": unlimited loopback")
	switchSizes := fs.String("switch", switchFlag(d), "sizes FROM-TO at which the hierarchy's AllReduce paths (latency vs 2D) are measured against each other; \"off\": skip")
	fs.StringVar(&o.limiter, "limiter", "", "how to limit the inter-node links: tbf, wrapper or none (default: tbf when root and available, else wrapper)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (every setting is a flag; see -h)", fs.Arg(0))
	}
	if *configFile != "" {
		f, err := os.Open(*configFile)
		if err != nil {
			return o, err
		}
		err = bench.LoadConfig(f, &o.cfg)
		f.Close()
		if err != nil {
			return o, fmt.Errorf("%s: %w", *configFile, err)
		}
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		c := &o.cfg
		switch f.Name {
		case "np":
			c.Ranks = *np
		case "nodes":
			c.Nodes = *nodes
		case "network":
			c.Network = *network
		case "ops":
			c.Ops = strings.Split(*ops, ",")
			for i := range c.Ops {
				c.Ops[i] = strings.TrimSpace(c.Ops[i])
			}
		case "b", "e":
			v, perr := bench.ParseSize(map[string]string{"b": *minBytes, "e": *maxBytes}[f.Name])
			if perr != nil {
				err = errors.Join(err, fmt.Errorf("-%s: %w", f.Name, perr))
			}
			if f.Name == "b" {
				c.MinBytes = bench.Size(v)
			} else {
				c.MaxBytes = bench.Size(v)
			}
		case "f":
			c.Factor = *factor
		case "dtype":
			c.DType = *dtype
		case "redop":
			c.RedOp = *redop
		case "root":
			c.Root = *root
		case "w":
			c.Warmup = *warmup
		case "iters":
			c.Iters = *iters
		case "repeats":
			c.Repeats = *repeats
		case "budget":
			c.Budget = bench.Duration(*budget)
		case "check":
			c.Check = *check
		case "inprocess":
			c.InProcess = *inProcess
		case "timeout":
			c.Timeout = bench.Duration(*timeout)
		case "link-rate":
			c.LinkRate = *linkRate
		case "switch":
			from, to, perr := parseSwitch(*switchSizes)
			if perr != nil {
				err = errors.Join(err, fmt.Errorf("-switch: %w", perr))
			}
			c.SwitchFrom, c.SwitchTo = bench.Size(from), bench.Size(to)
		}
	})
	if err != nil {
		return o, err
	}
	switch {
	case o.cfg.Ranks < 1:
		return o, fmt.Errorf("-np %d: want at least 1 rank", o.cfg.Ranks)
	case o.cfg.Nodes < 0 || (o.cfg.Nodes > 0 && o.cfg.Ranks%o.cfg.Nodes != 0 && !o.cfg.InProcess):
		return o, fmt.Errorf("-np %d on -nodes %d: the ranks must split evenly over the nodes", o.cfg.Ranks, o.cfg.Nodes)
	case o.cfg.Network == "memory" && !o.cfg.InProcess && !cluster.IsLocalChild():
		return o, errors.New("-network memory needs -inprocess (processes need quic or tcp)")
	case o.cfg.Network != "quic" && o.cfg.Network != "tcp" && o.cfg.Network != "memory":
		return o, fmt.Errorf("-network %q: want quic or tcp (or memory with -inprocess)", o.cfg.Network)
	case o.limiter != "" && o.limiter != limitTBF && o.limiter != limitWrapper && o.limiter != limitNone:
		return o, fmt.Errorf("-limiter %q: want %s, %s or %s", o.limiter, limitTBF, limitWrapper, limitNone)
	}
	if _, err := linkBits(o.cfg.LinkRate); err != nil {
		return o, fmt.Errorf("-link-rate: %w", err)
	}
	return o, nil
}

// runProcesses starts the ranks as child processes of this program (the
// same arguments, plus where rank 0 writes the result) and reads rank 0's
// result once every rank has exited cleanly.
func runProcesses(ctx context.Context, o options, args []string, stderr io.Writer, log *slog.Logger) (bench.Result, error) {
	f, err := os.CreateTemp("", "hiercomm-bench-*.json")
	if err != nil {
		return bench.Result{}, err
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
		return bench.Result{}, err
	}
	// The memory ceiling the intra-node goals are judged against, measured
	// before the job starts so nothing competes with it.
	copyRows := bench.MeasureCopy(bench.CopySizes, 5)
	lim, err := chooseLimiter(ctx, o.cfg.LinkRate, o.limiter, layout, log)
	if err != nil {
		return bench.Result{}, err
	}
	// The fabric goes when this function returns: after the job has
	// ended, whether it failed or was interrupted (ctx ends on SIGINT and
	// SIGTERM, which stops the job).
	defer lim.close(log)
	log.Info("starting local job", "ranks", o.cfg.Ranks, "nodes", nodes, "network", o.cfg.Network, "ops", strings.Join(o.cfg.Ops, ","), "links", lim.describe)
	start := time.Now()
	// A later -json wins, so the children write where this process reads.
	childArgs := append(append([]string(nil), args...), "-limiter", lim.kind, "-json", path)
	spec := cluster.LocalSpec{
		RanksPerNode: layout, Network: o.cfg.Network, Path: exe, Args: childArgs, Stdout: stderr, Stderr: stderr,
	}
	if lim.fabric != nil {
		spec.Fabric = lim.fabric
	}
	job, err := cluster.StartLocal(ctx, spec)
	if err != nil {
		return bench.Result{}, err
	}
	if err := job.Wait(); err != nil {
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return bench.Result{}, fmt.Errorf("the run took longer than -timeout %v, so the local job was stopped (%w); raise -timeout or measure less (-e, -ops)", time.Duration(o.cfg.Timeout), err)
		case ctx.Err() != nil:
			return bench.Result{}, fmt.Errorf("interrupted; the local job was stopped (%w)", err)
		}
		return bench.Result{}, fmt.Errorf("local job: %w; the ranks' logs above say why", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return bench.Result{}, err
	}
	var res bench.Result
	if err := json.Unmarshal(b, &res); err != nil {
		return bench.Result{}, fmt.Errorf("reading rank 0's result: %w", err)
	}
	log.Info("local job done", "elapsed", time.Since(start).Round(time.Millisecond))
	res.Nodes, res.Copy, res.Limiter = nodes, copyRows, lim.describe
	return res, nil
}

// runChild is one rank of a local job.
func runChild(ctx context.Context, o options, spec bench.Spec, log *slog.Logger) error {
	c, err := hiercomm.Init(ctx, hiercomm.Options{Logger: log, Nexar: nexar.Options{Logger: log}})
	if err != nil {
		return fmt.Errorf("joining the local job: %w", err)
	}
	if c.Rank() == 0 { // StartLocal prefixes the children's lines with their rank
		log.Info("topology: " + strings.ReplaceAll(c.Topology().String(), "\n", "; "))
		spec.Progress = progress(log)
	}
	res, err := measureWorld(ctx, c, o, spec, log)
	if cerr := c.Close(); err == nil && cerr != nil && !errors.Is(cerr, comm.ErrClosed) {
		log.Warn("closing the communicator", "err", cerr)
	}
	if err != nil {
		return err
	}
	if c.Rank() == 0 && o.jsonOut != "" {
		return writeJSON(o.jsonOut, res)
	}
	return nil
}

// runInProcess runs every rank as a goroutine of this process.
func runInProcess(ctx context.Context, cfg bench.Config, spec bench.Spec, log *slog.Logger) (bench.Result, error) {
	opt := nexar.Options{Logger: log}
	var comms []*nexar.Comm
	var err error
	if cfg.Network == "memory" {
		comms, err = nexar.NewMemoryWorld(cfg.Ranks, opt)
	} else {
		comms, err = nexar.NewLocalWorld(ctx, cfg.Ranks, cfg.Network, opt)
	}
	if err != nil {
		return bench.Result{}, err
	}
	defer nexar.CloseAll(comms)
	log.Info("running in process", "ranks", cfg.Ranks, "network", cfg.Network, "ops", strings.Join(cfg.Ops, ","))
	results := make([]bench.Result, len(comms))
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		s := spec
		if r == 0 {
			s.Progress = progress(log)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[r], errs[r] = bench.Run(ctx, c, s)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return bench.Result{}, fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return results[0], nil
}

// progress logs each operation as its sweep begins, and each row at debug
// level.
func progress(log *slog.Logger) func(bench.Row) {
	var op string
	return func(r bench.Row) {
		if r.Op != op {
			op = r.Op
			log.Info("measuring", "op", r.Op)
		}
		log.Debug("measured", "op", r.Op, "bytes", r.Bytes, "iters", r.Iters, "time_us", r.TimeUS, "busbw_GBps", r.BusBW, "wrong", r.Wrong)
	}
}

// report prints the tables and the summary; a wrong result is a failure.
func report(res bench.Result, o options, stdout io.Writer, log *slog.Logger) int {
	where := fmt.Sprintf("%d processes", res.Ranks)
	if o.cfg.InProcess {
		where = fmt.Sprintf("%d ranks in one process", res.Ranks)
	}
	if res.Nodes > 0 {
		where = fmt.Sprintf("%d processes on %d emulated node(s)", res.Ranks, res.Nodes)
	}
	fmt.Fprintf(stdout, "# hiercomm-bench: hiercomm.Init over %s, %s\n", o.cfg.Network, where)
	if res.Limiter != "" {
		fmt.Fprintf(stdout, "# inter-node links: %s\n", res.Limiter)
	}
	if len(res.Comms) > 0 {
		fmt.Fprintf(stdout, "# communicators, measured interleaved on the same processes: %s\n", strings.Join(res.Comms, ", "))
	}
	if len(res.Copy) > 0 {
		fmt.Fprint(stdout, "# copy() single thread:")
		for _, c := range res.Copy {
			fmt.Fprintf(stdout, " %s %.2f GB/s", bench.FormatSize(c.Bytes), c.GBs)
		}
		fmt.Fprintln(stdout)
	}
	fmt.Fprintln(stdout, "#")
	if err := res.Format(stdout); err != nil {
		log.Error("hiercomm-bench: writing the tables", "err", err)
		return 1
	}
	if err := reportComparison(stdout, res); err != nil {
		log.Error("hiercomm-bench: writing the comparison", "err", err)
		return 1
	}
	if err := bench.Summarize(res).Format(stdout); err != nil {
		return 1
	}
	if o.jsonOut != "" {
		if err := writeJSON(o.jsonOut, res); err != nil {
			log.Error("hiercomm-bench: writing JSON", "err", err)
			return 1
		}
	}
	w := res.Wrong()
	if res.Switch != nil {
		w = max(w, 0) + max(res.Switch.Wrong(), 0)
	}
	if w > 0 {
		log.Error("hiercomm-bench: wrong results", "elements", w, "hint", "the rows with #wrong > 0 name the operations and sizes")
		return 1
	}
	return 0
}

func writeJSON(path string, res bench.Result) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
