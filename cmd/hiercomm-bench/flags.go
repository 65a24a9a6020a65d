package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hiercomm/hiercomm/bench"
	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/nexar/transport/netmesh"
)

// options is what the command line says beyond the Config.
type options struct {
	cfg      bench.Config
	jsonOut  string   // -json: the report (report.go)
	csvOut   string   // -csv: one line per row
	plotOut  string   // -plot: an SVG of busbw and time against size
	impl     string   // -impl: the one communicator to measure
	compare  []string // -compare: the communicators to measure in turn
	split    string   // -split: "intra" or "inter"
	simulate bool     // -simulate: fit a model to the run, and predict
	sim      simulation
	verbose  bool
	args     []string // the command line, for the report
	// limiter is set by the parent for its children: how the inter-node
	// links are limited ("tbf", "wrapper" or "none"; see limiter.go).
	limiter string
	// stream is set by the parent for its children: where rank 0 writes
	// its events (stream.go).
	stream string
}

// The communicators -impl and -compare may name.
var implNames = []string{commHier, commFlat, commSHM, commNCCL}

// errUsage marks an error in the command line: exit status 2.
var errUsage = errors.New("usage")

// parseArgs resolves the configuration: the embedded default, then the
// -config file, then the flags that were given. Its errors are one line.
func parseArgs(args []string, stderr io.Writer) (options, error) {
	var o options
	o.args = args
	if err := bench.LoadConfig(strings.NewReader(defaultConfig), &o.cfg); err != nil {
		return o, fmt.Errorf("embedded default: %w", err) // a build bug
	}
	d := o.cfg
	fs := flag.NewFlagSet("hiercomm-bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are ours to print, in one line
	fs.Usage = func() {}
	// nccl-tests' flags.
	minBytes := fs.String("b", bench.FormatSize(int64(d.MinBytes)), "smallest size in bytes (K, M, G suffixes), as nccl-tests -b")
	maxBytes := fs.String("e", bench.FormatSize(int64(d.MaxBytes)), "largest size, as nccl-tests -e")
	factor := fs.Int("f", d.Factor, "multiply the size by this factor from one step to the next (nccl-tests -f)")
	stepBytes := fs.String("i", "0", "add this many bytes from one step to the next instead of -f (nccl-tests -i)")
	iters := fs.Int("n", d.Iters, "timed iterations per repeat; 0: as many as fit -budget (nccl-tests -n; its default is 20)")
	warmup := fs.Int("w", d.Warmup, "warmup iterations per size and form; the check's run counts as the first (nccl-tests -w)")
	check := fs.Int("c", boolInt(d.Check), "1: check every size and form with rank-distinct data (#wrong); 0: do not (nccl-tests -c)")
	dtype := fs.String("d", d.DType, "element type: float, double, half, bfloat16, int8, uint8, int32, uint32, int64, uint64 (or f32, bf16, i16, bool, f8e4m3, …) (nccl-tests -d)")
	redop := fs.String("o", d.RedOp, "reduction: sum, prod, min, max, avg, band, bor, bxor, premulsum (factor 1) (nccl-tests -o)")
	root := fs.Int("r", d.Root, "root of broadcast and reduce (nccl-tests -r)")
	average := fs.Int("a", averageFlag(d), "how the ranks' times combine: 0 rank 0's, 1 the mean, 2 the fastest rank's, 3 the slowest's (nccl-tests -a)")
	agg := fs.Int("m", 1, "calls per timed iteration (nccl-tests -m); hiercomm has no grouped calls, so only 1")
	// Ours.
	configFile := fs.String("config", "", "JSON `file` with the fields of the embedded default (default.json); flags override it")
	np := fs.Int("np", d.Ranks, "number of ranks (processes) of the local job")
	nodes := fs.Int("nodes", d.Nodes, "number of emulated nodes the local job's ranks are spread over (-np must be a multiple)")
	network := fs.String("network", d.Network, "transport: quic (QUIC and its TLS lane for large frames), quic-only or tcp (memory with -inprocess)")
	conns := fs.Int("conns", d.Conns, "data connections between each pair of processes, frames spread over them (HIERCOMM_CONNS_PER_PEER); 0: the transport's default, 1")
	ops := fs.String("ops", strings.Join(d.Ops, ","), "comma-separated operations: "+strings.Join(bench.OpNames(), ", ")+" (nccl-tests' names, e.g. all_reduce, work too)")
	repeats := fs.Int("repeats", d.Repeats, "timed repeats per size and form; the median is reported")
	budget := fs.Duration("budget", time.Duration(d.Budget), "time a repeat aims for when -n is 0")
	inProcess := fs.Bool("inprocess", d.InProcess, "run the ranks as goroutines of this process, as one flat nexar world (no hiercomm.Init: no membership, shared memory or hierarchy), over the in-memory transport with -network memory, else over loopback sockets")
	timeout := fs.Duration("timeout", time.Duration(d.Timeout), "bound on the whole run (0: none)")
	fs.StringVar(&o.jsonOut, "json", "", "write the run (settings, topology, ceilings, every row) as JSON to `file` (schema in docs/benchmarks.md)")
	fs.StringVar(&o.csvOut, "csv", "", "write one line per measured row as CSV to `file`")
	fs.StringVar(&o.plotOut, "plot", "", "draw busbw and time against size as an SVG `file`, one line per communicator")
	impl := fs.String("impl", "", "measure only this communicator: hier (what hiercomm.Init returns on several nodes), flat (nexar over every rank), shm (shared memory within a node) or nccl")
	compare := fs.String("compare", "", "measure these communicators in turn at each size, e.g. hier,flat (the default on several nodes)")
	fs.StringVar(&o.split, "split", "", "measure only within nodes (intra) or only across them, one rank per node (inter), as NCCL_TESTS_SPLIT")
	simulate := fs.String("simulate", "", "after the run, fit an alpha-beta model to its flat sendrecv, print its error on the run's flat rows, and predict flat and hierarchical collectives on NODESxRANKS (e.g. 128x8) from the schedules; \"local\": the error only")
	simLink := fs.String("sim-link", "", "-simulate: each inter-node link's rate each way (400gbit, 50GB/s); default: the run's fitted rate")
	simIntra := fs.String("sim-intra", "", "-simulate: the bandwidth within a node (900GB/s); default 100GB/s")
	fs.BoolVar(&o.verbose, "v", false, "log every measured row and the transport's debug events")
	linkRate := fs.String("link-rate", d.LinkRate, "limit each inter-node link of the local job to this rate each way (1gbit, 500mbit): tbf on emulated NICs when root, else a wrapper; \"off\": unlimited loopback")
	switchSizes := fs.String("switch", switchFlag(d), "sizes FROM-TO at which the hierarchy's AllReduce paths (latency vs 2D) are measured against each other; \"off\": skip")
	fs.StringVar(&o.limiter, "limiter", "", "how to limit the inter-node links: tbf, wrapper or none (default: tbf when root and available, else wrapper)")
	fs.StringVar(&o.stream, "stream", "", "(set by hiercomm-bench for its own ranks) where rank 0 writes its rows")
	// The names before nccl-tests' were adopted; they still work.
	oldIters := fs.Int("iters", d.Iters, "old name of -n")
	oldCheck := fs.Bool("check", d.Check, "old name of -c (true or false)")
	oldDType := fs.String("dtype", d.DType, "old name of -d")
	oldRedOp := fs.String("redop", d.RedOp, "old name of -o")
	oldRoot := fs.Int("root", d.Root, "old name of -r")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stderr, fs, d)
			return o, err
		}
		return o, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("%w: unexpected argument %q (every setting is a flag)", errUsage, fs.Arg(0))
	}
	if *configFile != "" {
		f, err := os.Open(*configFile)
		if err != nil {
			return o, fmt.Errorf("%w: -config: %v", errUsage, err)
		}
		err = bench.LoadConfig(f, &o.cfg)
		f.Close()
		if err != nil {
			return o, fmt.Errorf("%w: -config %s: %v", errUsage, *configFile, err)
		}
	}
	var errs []error
	bad := func(name string, err error) { errs = append(errs, fmt.Errorf("-%s: %w", name, err)) }
	size := func(name, v string) bench.Size {
		n, err := bench.ParseSize(v)
		if err != nil {
			bad(name, err)
		}
		return bench.Size(n)
	}
	fs.Visit(func(f *flag.Flag) {
		c := &o.cfg
		switch f.Name {
		case "np":
			c.Ranks = *np
		case "nodes":
			c.Nodes = *nodes
		case "network":
			c.Network = *network
		case "conns":
			c.Conns = *conns
		case "ops":
			c.Ops = nil
			for op := range strings.SplitSeq(*ops, ",") {
				c.Ops = append(c.Ops, opName(strings.TrimSpace(op)))
			}
		case "b":
			c.MinBytes = size("b", *minBytes)
		case "e":
			c.MaxBytes = size("e", *maxBytes)
		case "f":
			c.Factor = *factor
		case "i":
			c.StepBytes = size("i", *stepBytes)
		case "n", "iters":
			c.Iters = map[string]int{"n": *iters, "iters": *oldIters}[f.Name]
		case "w":
			c.Warmup = *warmup
		case "c":
			if *check < 0 {
				bad("c", fmt.Errorf("%d: want 0 (no check) or 1", *check))
			}
			c.Check = *check > 0
		case "check":
			c.Check = *oldCheck
		case "d", "dtype":
			c.DType = map[string]string{"d": *dtype, "dtype": *oldDType}[f.Name]
		case "o", "redop":
			c.RedOp = map[string]string{"o": *redop, "redop": *oldRedOp}[f.Name]
		case "r", "root":
			c.Root = map[string]int{"r": *root, "root": *oldRoot}[f.Name]
		case "a":
			a, err := bench.AverageFromNCCL(*average)
			if err != nil {
				bad("a", err)
			}
			c.Average = a.Name()
		case "m":
			if *agg != 1 {
				bad("m", fmt.Errorf("%d: hiercomm has no grouped calls to aggregate; only -m 1 is supported", *agg))
			}
		case "repeats":
			c.Repeats = *repeats
		case "budget":
			c.Budget = bench.Duration(*budget)
		case "inprocess":
			c.InProcess = *inProcess
		case "timeout":
			c.Timeout = bench.Duration(*timeout)
		case "link-rate":
			c.LinkRate = *linkRate
		case "switch":
			from, to, err := parseSwitch(*switchSizes)
			if err != nil {
				bad("switch", err)
			}
			c.SwitchFrom, c.SwitchTo = bench.Size(from), bench.Size(to)
		case "simulate":
			o.simulate = true
			if *simulate != "local" {
				var err error
				if o.sim.nodes, o.sim.perNode, err = parseSimulate(*simulate); err != nil {
					bad("simulate", err)
				}
			}
		case "sim-link":
			r, err := parseBytesRate(*simLink)
			if err != nil {
				bad("sim-link", err)
			}
			o.sim.linkBits = uint64(r * 8)
		case "sim-intra":
			r, err := parseBytesRate(*simIntra)
			if err != nil {
				bad("sim-intra", err)
			}
			o.sim.intraBytes = r
		case "impl":
			o.impl = *impl
		case "compare":
			for name := range strings.SplitSeq(*compare, ",") {
				o.compare = append(o.compare, strings.TrimSpace(name))
			}
		}
	})
	if len(errs) > 0 {
		return o, fmt.Errorf("%w: %v", errUsage, errs[0])
	}
	if err := o.check(); err != nil {
		return o, fmt.Errorf("%w: %v", errUsage, err)
	}
	return o, nil
}

// check refuses combinations of settings that cannot run.
func (o options) check() error {
	c := o.cfg
	inChild := cluster.IsLocalChild() || o.stream != ""
	switch {
	case c.Ranks < 1:
		return fmt.Errorf("-np %d: want at least 1 rank", c.Ranks)
	case c.Nodes < 0 || (c.Nodes > 0 && c.Ranks%c.Nodes != 0 && !c.InProcess):
		return fmt.Errorf("-np %d on -nodes %d: the ranks must split evenly over the nodes", c.Ranks, c.Nodes)
	case c.Network == "memory" && !c.InProcess && !inChild:
		return errors.New("-network memory needs -inprocess (processes need quic or tcp)")
	case c.Network != "memory" && !knownNetwork(c.Network):
		return fmt.Errorf("-network %q: want %s (or memory with -inprocess)", c.Network, netmesh.Networks)
	case c.Conns < 0 || c.Conns > launchenv.MaxConnsPerPeer:
		return fmt.Errorf("-conns %d: want 1 to %d (0: the transport's default, 1)", c.Conns, launchenv.MaxConnsPerPeer)
	case c.Conns > 1 && c.InProcess:
		return fmt.Errorf("-conns %d with -inprocess: connections per peer are a setting of the processes' data mesh; drop -inprocess", c.Conns)
	case o.limiter != "" && o.limiter != limitTBF && o.limiter != limitWrapper && o.limiter != limitNone:
		return fmt.Errorf("-limiter %q: want %s, %s or %s", o.limiter, limitTBF, limitWrapper, limitNone)
	case o.split != "" && o.split != splitIntra && o.split != splitInter:
		return fmt.Errorf("-split %q: want intra (within each node) or inter (one rank per node, across nodes)", o.split)
	case o.impl != "" && len(o.compare) > 0:
		return errors.New("-impl and -compare: give one (-impl X measures X alone, -compare X,Y measures both)")
	case o.split != "" && (o.impl != "" || len(o.compare) > 0):
		return errors.New("-split measures the within-node or across-node communicator alone: leave out -impl and -compare")
	case (o.impl != "" || len(o.compare) > 0 || o.split != "") && c.InProcess:
		return errors.New("-impl, -compare and -split choose among the communicators hiercomm.Init builds; -inprocess builds one flat world")
	}
	for _, name := range append([]string{o.impl}, o.compare...) {
		if name != "" && !slices.Contains(implNames, name) {
			return fmt.Errorf("communicator %q: want one of %s", name, strings.Join(implNames, ", "))
		}
	}
	if len(o.compare) == 1 {
		return fmt.Errorf("-compare %s: name two or more communicators (or use -impl %s)", o.compare[0], o.compare[0])
	}
	if _, err := linkBits(c.LinkRate); err != nil {
		return fmt.Errorf("-link-rate: %w", err)
	}
	spec, err := c.Spec()
	if err == nil {
		err = spec.Validate(c.Ranks)
	}
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "bench.Spec: "))
	}
	return nil
}

// usage prints -h: what the command does, then its flags.
func usage(w io.Writer, fs *flag.FlagSet, d bench.Config) {
	fmt.Fprintf(w, "usage: hiercomm-bench [flags]\n\n"+
		"Measures hiercomm's collectives the way nccl-tests does. Started alone, it\n"+
		"launches a local job of %d processes on %d emulated nodes over %s (%s, %s … %s).\n"+
		"Started by torchrun, Slurm's srun, Kubernetes or `hiercomm run`, it is one rank\n"+
		"of that job, and rank 0 prints. nccl-tests' flags (-b -e -f -i -n -w -c -d -o -r -a -m)\n"+
		"mean what they mean there.\n\n",
		d.Ranks, max(d.Nodes, 1), d.Network, strings.Join(d.Ops, ","), bench.FormatSize(int64(d.MinBytes)), bench.FormatSize(int64(d.MaxBytes)))
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// opName maps nccl-tests' names (all_reduce, all_reduce_perf, …) to ours.
func opName(s string) string {
	s = strings.TrimSuffix(s, "_perf")
	if n := strings.ReplaceAll(s, "_", ""); slices.Contains(bench.OpNames(), n) {
		return n
	}
	return s
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// averageFlag is the Config's average as nccl-tests' -a value.
func averageFlag(c bench.Config) int {
	a, err := bench.ParseAverage(c.Average)
	if err != nil {
		return 1
	}
	return a.NCCL()
}

// knownNetwork reports whether n names one of nexar's networks.
func knownNetwork(n string) bool {
	_, err := netmesh.SocketNetwork(n)
	return err == nil
}
