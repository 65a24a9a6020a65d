// Command hiercomm is the operator's tool around hiercomm jobs.
//
//	hiercomm run [flags] -- PROGRAM [ARGS...]
//	    Start a job of emulated nodes on this host: --nodes N nodes with
//	    --ranks-per-node G processes each (or a comma list, one count per
//	    node), every process started with the variables a real launcher
//	    sets (--env torchrun, slurm or kubernetes). Node n is 127.0.0.(n+1)
//	    with its own host id. Each output line is prefixed with its rank.
//	    When one process fails, the others get --grace (20 s) to report
//	    and exit by themselves, then SIGTERM, then --kill-after (10 s)
//	    later SIGKILL; hiercomm prints a line naming the rank that failed
//	    first and exits with its status: the rank the others blame (each
//	    rank's World writes, at its first error that blames a rank, a line
//	    to the file HIERCOMM_STATUS_FILE names), else the first to exit.
//	    Ctrl-C or SIGTERM is passed on as SIGTERM, with --kill-after
//	    before SIGKILL (a second one kills at once). SIGUSR1 is passed on
//	    to every rank: a program that called hiercomm.Init writes its
//	    communicators' flight recorders to its log. PROGRAM may be a Go
//	    package directory (./examples/allreduce): it is built once first.
//	    With --link-rate RATE (root only), the nodes are network
//	    namespaces joined by links limited to RATE in each direction (tc's
//	    syntax: 1gbit, 500mbit), one per rank, or one per node with
//	    --link-per-node; within a node nothing is limited. The namespaces
//	    are removed when the job ends, fails or is interrupted. With
//	    --elastic a failure stops no one, and the job succeeds when the
//	    ranks that exited 0 shrank past every rank that failed; with
//	    --replace-failed N as well, up to N failed ranks are replaced by
//	    processes that join the running job (HIERCOMM_JOIN=running).
//	hiercomm topology FILE
//	    Check a topology dumped as JSON and print it as a table.
//	hiercomm plan [-rank R] [-gpu N] FILE
//	    Print the Plan hiercomm.Init would build for rank R of that
//	    topology (layout, transports, routes and their switch sizes,
//	    timeouts), with the launch's choices read from the environment.
//	hiercomm keygen
//	    Print a random job key for HIERCOMM_JOB_KEY.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/internal/netemu"
	"github.com/hiercomm/hiercomm/topology"
)

const usage = `usage:
  hiercomm run [flags] -- PROGRAM [ARGS...]
      Start a job of emulated nodes on this host (--nodes, --ranks-per-node,
      --env torchrun|slurm|kubernetes, --placement, --network, --link-rate);
      hiercomm run --help lists the flags.
  hiercomm topology FILE
      Check a topology dumped as JSON (HIERCOMM_TOPO_DUMP_FILE) and print it
      as a table.
  hiercomm plan [-rank R] [-gpu N] FILE
      Print what hiercomm.Init would build for rank R of that topology: the
      layout, transports, routes with their switch sizes, timeouts.
  hiercomm keygen
      Print a random job key for HIERCOMM_JOB_KEY.
`

const runUsage = `usage: hiercomm run [flags] -- PROGRAM [ARGS...]

Starts --nodes N emulated nodes with --ranks-per-node G processes each (or
a comma list, one count per node), every process started with the variables
a real launcher sets; node n is 127.0.0.(n+1). Each output line is prefixed
with its rank. When one process fails, the others get --grace to report and
exit by themselves, then SIGTERM, then --kill-after later SIGKILL; hiercomm
exits with the status of the rank that failed first and names it: the rank
the others' errors blame (a program that called hiercomm.Init tells the
launcher, through the file HIERCOMM_STATUS_FILE names, which rank the first
failed call on its World blamed or found late), or, when none blamed one,
the first to exit. Ctrl-C or SIGTERM is passed on as SIGTERM, --kill-after
before SIGKILL; a second one kills at once; the line then names the first
rank to end with an error. SIGUSR1 is passed on to every rank (a program
that called hiercomm.Init writes its flight recorders to its log). PROGRAM
may be a Go package directory, built first.

With --elastic, a rank's failure stops no one: an elastic program's ranks
Shrink past it and go on, and the job succeeds (exit 0) when every rank
that failed was shrunk past by ranks that exited 0 (each World's Shrink
says which ranks it left behind in the same file). With --replace-failed
N as well, each of the first N ranks to fail is replaced by a process
started on its node with HIERCOMM_JOIN=running: it joins the running job
when the others call World.Grow, and must exit 0 too.

flags:
`

func main() { os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr)) }

// dispatch runs the subcommand args name and returns the exit code: 0 on
// success and for --help, 2 for a usage error (one line on stderr).
func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return run(args[1:], stdout, stderr)
	case "topology":
		return showTopology(args[1:], stdout, stderr)
	case "plan":
		return showPlan(args[1:], stdout, stderr)
	case "keygen":
		return keygen(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "hiercomm: unknown command %q (hiercomm --help lists them)\n", args[0])
	return 2
}

// parseFlags parses a subcommand's flags (fs named "hiercomm CMD"):
// --help prints usage and the flags on stdout (exit 0), a bad flag is one
// line on stderr (exit 2); done reports that the command ends there.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stdout, stderr io.Writer) (code int, done bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return 0, true
	}
	fmt.Fprintf(stderr, "%s: %v (%s --help lists the flags)\n", fs.Name(), err, fs.Name())
	return 2, true
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

func keygen(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 1 && isHelp(args[0]):
		fmt.Fprint(stdout, "usage: hiercomm keygen\n\nPrints a random 32-byte job key, hex-encoded, for HIERCOMM_JOB_KEY.\n")
		return 0
	case len(args) > 0:
		fmt.Fprintf(stderr, "hiercomm keygen: takes no arguments, got %q\n", args)
		return 2
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		fmt.Fprintln(stderr, "hiercomm keygen:", err)
		return 1
	}
	fmt.Fprintln(stdout, hex.EncodeToString(key))
	return 0
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hiercomm run", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are one line of ours; --help prints the usage
	nodes := fs.Int("nodes", 1, "number of emulated nodes")
	perNode := fs.String("ranks-per-node", "1", "processes per node: one count, or a comma list with one count per node")
	style := fs.String("env", "torchrun", "launcher variables the processes get: torchrun, slurm or kubernetes")
	placement := fs.String("placement", "block", "rank placement: block (node-major) or cyclic (round-robin over nodes)")
	network := fs.String("network", "quic", "data plane: quic (QUIC and its TLS lane for large frames), quic-only or tcp")
	jobID := fs.String("job-id", "", "job id (default: a random local-… id)")
	linkRate := fs.String("link-rate", "", "emulate the nodes in network namespaces, with links limited to this rate each way (tc syntax: 1gbit, 500mbit); needs root")
	linkPerNode := fs.Bool("link-per-node", false, "with --link-rate: one link per node shared by its ranks (default: one per rank)")
	grace := fs.Duration("grace", cluster.DefaultGrace, "after a rank fails, how long the others get to report and exit by themselves before SIGTERM")
	elastic := fs.Bool("elastic", false, "a rank's failure does not stop the others: they may Shrink past it and train on (the job succeeds when every rank that failed was shrunk past by ranks that exited 0); --grace does not apply")
	replace := fs.Int("replace-failed", 0, "with --elastic: replace up to N failed ranks, each by a process started on its node with HIERCOMM_JOIN=running, which joins the running job when the others Grow (the job then succeeds when every replacement exits 0 too)")
	bind := fs.String("bind", "", "how the ranks are bound to this host's CPUs: none (the kernel places them) or core (each its share, as mpirun --bind-to core; with more ranks than CPUs, rank i on CPU i mod CPUs) (default: $HIERCOMM_BIND, else none)")
	killAfter := fs.Duration("kill-after", cluster.DefaultKillAfter, "how long a rank gets after SIGTERM (after --grace, or passed on from Ctrl-C or SIGTERM) before SIGKILL")
	if code, done := parseFlags(fs, args, runUsage, stdout, stderr); done {
		return code
	}
	if *linkPerNode && *linkRate == "" {
		fmt.Fprintln(stderr, "hiercomm run: --link-per-node needs --link-rate")
		return 2
	}
	if *replace != 0 && (*replace < 0 || !*elastic) {
		fmt.Fprintf(stderr, "hiercomm run: --replace-failed %d: want a number of replacements ≥ 0, with --elastic (the others must go on to admit a replacement)\n", *replace)
		return 2
	}
	if *grace < 0 || *killAfter <= 0 {
		fmt.Fprintf(stderr, "hiercomm run: --grace %v and --kill-after %v: want a grace ≥ 0 and a positive kill-after\n", *grace, *killAfter)
		return 2
	}
	if *linkRate != "" {
		if _, err := netemu.ParseRate(*linkRate); err != nil {
			fmt.Fprintln(stderr, "hiercomm run: --link-rate:", err)
			return 2
		}
	}
	prog := fs.Args()
	if len(prog) == 0 {
		fmt.Fprintln(stderr, "hiercomm run: no program given (hiercomm run [flags] -- PROGRAM [ARGS...])")
		return 2
	}
	// A list of counts gives the number of nodes itself unless --nodes says it.
	n, given := 0, false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "nodes" {
			n, given = *nodes, true
		}
	})
	if given && n < 1 {
		fmt.Fprintf(stderr, "hiercomm run: --nodes %d: want at least 1 node\n", n)
		return 2
	}
	if n == 0 && !strings.Contains(*perNode, ",") {
		n = *nodes
	}
	layout, err := cluster.SplitRanksPerNode(n, *perNode)
	if err != nil {
		fmt.Fprintln(stderr, "hiercomm run:", err)
		return 2
	}
	spec := cluster.LocalSpec{
		RanksPerNode: layout,
		Style:        *style,
		Placement:    *placement,
		Network:      *network,
		JobID:        *jobID,
		Path:         prog[0],
		Args:         prog[1:],
		Stdout:       stdout,
		Stderr:       stderr,
		Grace:        *grace,
		KillAfter:    *killAfter,
		KeepOthers:   *elastic,
		Replace:      *replace,
		Bind:         *bind,
		Notify:       func(line string) { fmt.Fprintln(stderr, "hiercomm run:", line) },
	}
	if *grace == 0 {
		spec.Grace = -1 // none: LocalSpec's zero is its default
	}
	// Everything the flags say is checked before anything is built (the
	// program, the emulated network).
	if err := spec.Check(); err != nil {
		fmt.Fprintln(stderr, "hiercomm run:", err)
		return 2
	}
	path, cleanup, err := program(prog[0])
	if err != nil {
		fmt.Fprintln(stderr, "hiercomm run:", err)
		return 1
	}
	defer cleanup()
	spec.Path = path

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Ctrl-C or a scheduler's SIGTERM: pass it on as SIGTERM, give every
	// process --kill-after for its cleanup (one that exits meanwhile, even
	// by the signal, does not cut the others' short), then kill what is
	// left; a second signal kills at once. Caught from before the fabric
	// exists, so that it is always torn down.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	// SIGUSR1: every rank writes its flight recorders (hiercomm.Init's
	// handler); the job goes on.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	if *linkRate != "" {
		fab, err := netemu.Setup(ctx, netemu.Config{RanksPerNode: layout, Rate: *linkRate, PerNode: *linkPerNode})
		if err != nil {
			fmt.Fprintln(stderr, "hiercomm run: --link-rate:", err)
			return 1
		}
		defer func() {
			if err := fab.Close(); err != nil {
				fmt.Fprintln(stderr, "hiercomm run:", err)
			}
		}()
		fmt.Fprintln(stderr, "hiercomm run: emulated network:", fab.Describe())
		spec.Fabric = fab
	}
	// Each rank that blames another for its error says so in the status
	// file (hiercomm.EnvStatusFile), so that the summary names the culprit.
	statusPath, err := statusFile()
	if err != nil {
		fmt.Fprintln(stderr, "hiercomm run:", err)
		return 1
	}
	defer os.Remove(statusPath)
	spec.Env = append(spec.Env, hiercomm.EnvStatusFile+"="+statusPath)
	job, err := cluster.StartLocal(ctx, spec)
	if err != nil {
		fmt.Fprintln(stderr, "hiercomm run:", err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- job.Wait() }()
	var stopped os.Signal
	for {
		select {
		case <-usr1:
			fmt.Fprintln(stderr, "hiercomm run: SIGUSR1: passed on to every rank (each writes its flight recorders to its log)")
			job.Signal(syscall.SIGUSR1)
			continue
		case sig := <-sigs:
			if stopped != nil {
				fmt.Fprintf(stderr, "hiercomm run: %s again: killing the job\n", signalName(sig))
				cancel()
				continue
			}
			stopped = sig
			fmt.Fprintf(stderr, "hiercomm run: %s: SIGTERM to every rank; SIGKILL to what is left in %v (%s again: at once)\n", signalName(sig), *killAfter, signalName(sig))
			job.Stop(syscall.SIGTERM)
			continue
		case err = <-done:
		}
		break
	}
	if err == nil {
		return 0
	}
	var ee *cluster.LocalExitError
	if !errors.As(err, &ee) {
		fmt.Fprintln(stderr, "hiercomm run:", err)
		return 1
	}
	errs := job.Errors()
	if stopped != nil {
		fmt.Fprintln(stderr, "hiercomm run:", summary(ee, errs, stopped))
		return ee.ExitCode()
	}
	reports, bad := readStatus(statusPath)
	for _, e := range bad {
		fmt.Fprintln(stderr, "hiercomm run:", e)
	}
	if line, ok := shrankPast(reports, errs); ok {
		reps := job.Replacements()
		if line, code, failed := replacementFailed(reps); failed {
			fmt.Fprintln(stderr, "hiercomm run:", line)
			return code
		}
		fmt.Fprintln(stderr, "hiercomm run:", strings.TrimSuffix(line, "; exit status 0")+replaced(reps)+"; exit status 0")
		return 0
	}
	b, ok := findCulprit(reports, len(errs))
	if !ok {
		fmt.Fprintln(stderr, "hiercomm run:", summary(ee, errs, nil))
		return ee.ExitCode()
	}
	line, code := culpritSummary(b, ee, errs)
	fmt.Fprintln(stderr, "hiercomm run:", line)
	return code
}

// summary is the one line that ends a failed job when no rank blamed
// another (culpritSummary when one did) or after a stop signal: the rank
// that ended first (after a stop signal: not necessarily a fault), how,
// and what the others did.
func summary(first *cluster.LocalExitError, errs []error, stopped os.Signal) string {
	failed, clean := others(errs, first.Rank)
	what := "failed first"
	if stopped != nil {
		what = fmt.Sprintf("after %s, ended first with an error", signalName(stopped))
	}
	return fmt.Sprintf("rank %d %s: %s (pid %d); of the other %d ranks, %d failed and %d exited 0; exit status %d",
		first.Rank, what, exitStatus(first), first.Pid(), len(errs)-1, failed, clean, first.ExitCode())
}

// exitStatus says how a process ended: "exit status 7", "killed by
// SIGTERM", or the reason it did not run.
func exitStatus(err error) string {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err.Error()
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by " + signalName(ws.Signal())
	}
	return fmt.Sprintf("exit status %d", ee.ExitCode())
}

// signalName is SIGTERM for syscall.SIGTERM, and so on for the signals
// that usually end a job; others as "signal 10 (user defined signal 1)".
func signalName(sig os.Signal) string {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return sig.String()
	}
	if name, ok := signalNames[s]; ok {
		return name
	}
	return fmt.Sprintf("signal %d (%v)", int(s), s)
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGTERM: "SIGTERM", syscall.SIGKILL: "SIGKILL", syscall.SIGINT: "SIGINT",
	syscall.SIGSEGV: "SIGSEGV", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS",
	syscall.SIGQUIT: "SIGQUIT", syscall.SIGHUP: "SIGHUP", syscall.SIGPIPE: "SIGPIPE",
}

// program resolves what to run: a Go package directory is built once (so
// N processes don't each compile it), anything else is run as given.
func program(p string) (path string, cleanup func(), err error) {
	st, statErr := os.Stat(p)
	if statErr != nil || !st.IsDir() {
		if lp, err := exec.LookPath(p); err == nil {
			return lp, func() {}, nil
		}
		return p, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "hiercomm-run-")
	if err != nil {
		return "", nil, err
	}
	out := filepath.Join(dir, filepath.Base(filepath.Clean(p)))
	build := exec.Command("go", "build", "-o", out, "./"+filepath.Clean(p))
	if filepath.IsAbs(p) {
		build = exec.Command("go", "build", "-o", out, p)
	}
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building %s: %w", p, err)
	}
	return out, func() { os.RemoveAll(dir) }, nil
}

func showTopology(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && isHelp(args[0]) {
		fmt.Fprint(stdout, "usage: hiercomm topology FILE\n\nChecks a topology dumped as JSON (HIERCOMM_TOPO_DUMP_FILE) and prints it as a table.\n")
		return 0
	}
	if len(args) != 1 {
		fmt.Fprintf(stderr, "hiercomm topology: want one FILE, got %d arguments\n", len(args))
		return 2
	}
	f, err := os.Open(args[0])
	if err != nil {
		fmt.Fprintln(stderr, "hiercomm topology:", err)
		return 1
	}
	defer f.Close()
	t, err := topology.Load(f)
	if err != nil {
		fmt.Fprintf(stderr, "hiercomm topology: %s: %v\n", args[0], err)
		return 1
	}
	fmt.Fprintln(stdout, t)
	return 0
}
