//go:build linux

package shm_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/internal/nexarjob"
	"github.com/hiercomm/hiercomm/internal/procgroup"
	"github.com/hiercomm/hiercomm/nexar"
	"github.com/hiercomm/hiercomm/shm"
	"github.com/hiercomm/hiercomm/topology"
)

// The multi-process tests start this test binary again, once per rank;
// the environment tells a child its role and its place in the job, and
// multiprocMain sends it there before any test runs.
const (
	envRole     = "HIERCOMM_SHM_TEST_ROLE"
	envNS       = "HIERCOMM_SHM_TEST_NS"
	envRank     = "HIERCOMM_SHM_TEST_RANK"
	envSize     = "HIERCOMM_SHM_TEST_SIZE"
	envCounts   = "HIERCOMM_SHM_TEST_COUNTS"  // conformance: comma-separated counts; empty: the suite's defaults
	envSuites   = "HIERCOMM_SHM_TEST_SUITES"  // conformance: comma-separated suites; empty: all
	envSlot     = "HIERCOMM_SHM_TEST_SLOT"    // Config.SlotBytes; empty: the default
	envFailure  = "HIERCOMM_SHM_TEST_FAILURE" // Config.FailureTimeout; empty: the default
	envSeed     = "HIERCOMM_SHM_TEST_SEED"    // loop: the job's data seed
	envIters    = "HIERCOMM_SHM_TEST_ITERS"   // loop: iterations
	envLogLevel = "HIERCOMM_SHM_TEST_LOG"     // slog level of the child's logger; empty: info
	envDead     = "HIERCOMM_SHM_TEST_DEAD"    // crash: the rank the test kills
)

// testPrefix starts every namespace these tests use, so that the leak check
// at the end finds what any of them left behind (and nothing of another
// test run that happens to be going on at the same time).
var testPrefix = fmt.Sprintf("shmtest-%d", os.Getpid())

var namespaceSeq atomic.Int64

// testNamespace returns a namespace no other test of this run uses: the
// sequence number keeps one from being a prefix of another (Segments
// matches by prefix), the test's name says whose it is.
func testNamespace(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, t.Name())
	ns := fmt.Sprintf("%s-%03d-%s", testPrefix, namespaceSeq.Add(1), name)
	if len(ns) > 100 {
		ns = ns[:100]
	}
	return ns
}

// raceEnabled reports whether this binary was built with -race; the
// multi-process tests run a smaller matrix then.
var raceEnabled = func() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}()

// multiprocMain is the body of the package's TestMain: a child process runs
// its role and exits; the parent runs the tests, then fails the run if any
// segment of a test namespace is left in /dev/shm.
func multiprocMain(m *testing.M) int {
	if role := os.Getenv(envRole); role == "hierstall" {
		return childHierStall()
	} else if role != "" {
		return runChild(role)
	}
	code := m.Run()
	if err := checkNoLeakedSegments(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// checkNoLeakedSegments looks for files of any test namespace in /dev/shm.
func checkNoLeakedSegments() error {
	left, err := filepath.Glob("/dev/shm/hiercomm-" + testPrefix + "-*")
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("FAIL: the tests left %d shared-memory segment(s) behind: %s", len(left), strings.Join(left, " "))
	}
	return nil
}

// childConfig is the shm.Config of a child, from its environment.
func childConfig() (shm.Config, error) {
	cfg := shm.Config{Namespace: os.Getenv(envNS), Timeout: 5 * time.Minute}
	var err error
	if cfg.Rank, err = strconv.Atoi(os.Getenv(envRank)); err != nil {
		return cfg, fmt.Errorf("%s: %w", envRank, err)
	}
	if cfg.Size, err = strconv.Atoi(os.Getenv(envSize)); err != nil {
		return cfg, fmt.Errorf("%s: %w", envSize, err)
	}
	if s := os.Getenv(envSlot); s != "" {
		if cfg.SlotBytes, err = strconv.Atoi(s); err != nil {
			return cfg, fmt.Errorf("%s: %w", envSlot, err)
		}
	}
	if s := os.Getenv(envFailure); s != "" {
		if cfg.FailureTimeout, err = time.ParseDuration(s); err != nil {
			return cfg, fmt.Errorf("%s: %w", envFailure, err)
		}
	}
	level := slog.LevelInfo
	if s := os.Getenv(envLogLevel); s != "" {
		if err := level.UnmarshalText([]byte(s)); err != nil {
			return cfg, fmt.Errorf("%s: %w", envLogLevel, err)
		}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return cfg, nil
}

// runChild is one rank of a multi-process test; it returns the exit code:
// 0 when the role's checks passed, 1 when they failed, 2 when it could not
// start, 3 when it ended where it should have been killed.
func runChild(role string) int {
	cfg, err := childConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	c, err := shm.New(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: shm.New: %v\n", cfg.Rank, err)
		if role == "hold" {
			return 3
		}
		return 2
	}
	defer c.Close()
	switch role {
	case "conformance":
		return childConformance(ctx, c)
	case "crash":
		return childCrash(ctx, c, cfg)
	case "loop":
		return childLoop(ctx, c)
	case "stall":
		return childStall(ctx, c)
	case "hold":
		fmt.Printf("rank %d: New returned in a world that should never have formed\n", cfg.Rank)
		return 3
	}
	fmt.Fprintln(os.Stderr, "unknown role", role)
	return 2
}

// rankSuites are the rank-local conformance suites, in the order a child
// runs them; Mismatch is last because it may leave its communicator spent.
var rankSuites = []struct {
	name string
	run  func(context.Context, comm.Communicator, commtest.Options) error
}{
	{"RunRank", commtest.RunRank},
	{"P2P", commtest.P2PRank},
	{"NonBlocking", commtest.NonBlockingRank},
	{"Split", commtest.SplitRank},
	{"BadInput", commtest.BadInputRank},
	{"Fused", commtest.FusedRank},
	{"Mismatch", commtest.MismatchRank},
}

func childConformance(ctx context.Context, c *shm.Comm) int {
	var suites []string
	if s := os.Getenv(envSuites); s != "" {
		suites = strings.Split(s, ",")
	}
	rankOpt := commtest.Options{Timeout: 2 * time.Minute}
	if s := os.Getenv(envCounts); s != "" {
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", envCounts, err)
				return 2
			}
			rankOpt.Counts = append(rankOpt.Counts, n)
		}
	}
	failed := false
	for _, s := range rankSuites {
		if suites != nil && !slices.Contains(suites, s.name) {
			continue
		}
		opt := commtest.Options{Timeout: time.Minute}
		if s.name == "RunRank" {
			opt = rankOpt
		}
		start := time.Now()
		if err := s.run(ctx, c, opt); err != nil {
			fmt.Printf("rank %d: %s FAILED: %v\n", c.Rank(), s.name, err)
			failed = true
			if s.name == "RunRank" || s.name == "Split" {
				// The ranks may no longer agree on where they are.
				break
			}
			continue
		}
		fmt.Printf("rank %d: %s passed (%v)\n", c.Rank(), s.name, time.Since(start).Round(time.Millisecond))
	}
	if failed {
		return 1
	}
	fmt.Println("conformance passed")
	return 0
}

// crashCount is the length of the crash test's AllReduce: 16 MiB of f32,
// several times the default slot, so a call is surely in flight (chunk
// after chunk) when a rank is killed.
const crashCount = 4 << 20

// childCrash runs AllReduces until a rank is killed; a survivor checks the
// error it gets and that the communicator then fails fast.
func childCrash(ctx context.Context, c *shm.Comm, cfg shm.Config) int {
	x := make([]float32, crashCount)
	for i := 0; ; i++ {
		start := time.Now()
		err := c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum)
		if i == 3 {
			fmt.Println("READY")
		}
		if err == nil {
			continue
		}
		took := time.Since(start)
		fmt.Printf("SURVIVOR-ERROR rank %d after %v: %v\n", c.Rank(), took.Round(time.Millisecond), err)
		dead, _ := strconv.Atoi(os.Getenv(envDead))
		var pe *comm.PeerError
		switch {
		case !errors.Is(err, comm.ErrPeerFailed):
			fmt.Printf("rank %d: the error does not wrap comm.ErrPeerFailed\n", c.Rank())
			return 1
		case !errors.As(err, &pe) || pe.Peer != dead:
			fmt.Printf("rank %d: the error is not a *comm.PeerError for rank %d\n", c.Rank(), dead)
			return 1
		case !strings.Contains(err.Error(), fmt.Sprintf("rank %d failed", dead)):
			fmt.Printf("rank %d: the error message does not name rank %d\n", c.Rank(), dead)
			return 1
		}
		// A later call fails fast, with the cause.
		start = time.Now()
		y := []float32{1}
		err = c.AllReduce(ctx, comm.Host(y), comm.Host(y), comm.Sum)
		took = time.Since(start)
		switch {
		case err == nil:
			fmt.Printf("rank %d: an AllReduce after the failure succeeded\n", c.Rank())
			return 1
		case !errors.Is(err, comm.ErrAborted):
			fmt.Printf("rank %d: the call after the failure returned %v; want comm.ErrAborted\n", c.Rank(), err)
			return 1
		case took > time.Second:
			fmt.Printf("rank %d: the call after the failure took %v to fail\n", c.Rank(), took)
			return 1
		}
		if err := c.Close(); err != nil {
			fmt.Printf("rank %d: Close after the failure: %v\n", c.Rank(), err)
		}
		fmt.Println("SURVIVOR-OK")
		return 0
	}
}

// childStall runs AllReduces until one fails, and prints what the error
// blames: the test stops one rank (SIGSTOP) past FailureTimeout and
// continues it.
func childStall(ctx context.Context, c *shm.Comm) int {
	return allReduceUntilStall(ctx, c, c.Rank())
}

// allReduceUntilStall runs AllReduces on c until one fails, says READY
// after a few, and prints the error with what it blames: a STALL-ERROR
// line for requireStallReports, and which tier said that this rank was
// stalled.
func allReduceUntilStall(ctx context.Context, c comm.Communicator, rank int) int {
	x := make([]float32, 1<<12)
	for i := 0; ; i++ {
		err := c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum)
		if i == 3 {
			fmt.Println("READY")
		}
		if err == nil {
			continue
		}
		b, ok := comm.CulpritOf(err)
		viaShm, viaNexar := errors.Is(err, shm.ErrStalled), errors.Is(err, nexar.ErrStalled)
		fmt.Printf("STALL-ERROR rank=%d culprit=%d known=%v stalled=%v peerfailed=%v (shm %v, nexar %v): %v\n",
			rank, b.Rank, ok, viaShm || viaNexar, errors.Is(err, comm.ErrPeerFailed), viaShm, viaNexar, err)
		return 0
	}
}

// childHierStall is one rank of a 2x2 hierarchy, as hiercomm.Init wires
// it: the world over QUIC (nexarjob.Start), shared memory within each
// emulated node (global ranks 0 and 1 on node 0, 2 and 3 on node 1). It
// runs allReduceUntilStall.
func childHierStall() int {
	const failureTimeout = time.Second
	ctx := context.Background()
	cfg, err := nexarjob.Config(os.Getenv, nexar.Options{Timeout: time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg.Net.FailureTimeout = failureTimeout
	world, err := nexar.Connect(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rank := world.Rank()
	var members []topology.Member
	for r := range 4 {
		members = append(members, topology.Member{Rank: r, Host: fmt.Sprintf("node%d", r/2), Local: r % 2, Device: -1})
	}
	topo, err := topology.New(members)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	node := topo.NodeOf(rank)
	intra, err := shm.New(ctx, shm.Config{Namespace: fmt.Sprintf("%s-node%d", os.Getenv(envNS), node), Rank: topo.LocalRank(rank), Size: 2,
		FailureTimeout: failureTimeout, Name: fmt.Sprintf("node %d shm", node), Ranks: topo.Nodes()[node].Ranks})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	h, err := hierarchy.Build(ctx, world, topo, intra, hierarchy.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer h.Close()
	return allReduceUntilStall(ctx, h, rank)
}

// loopCount is the length of a loop job's buffers: with a 64 KiB slot,
// every call goes through many chunks.
const loopCount = 50_000

// loopValue is element i of rank's input in iteration it of the job with
// seed; every value is distinct across jobs, ranks, iterations and indices
// (within the range the sums stay exact).
func loopValue(seed, rank, it, i int) int64 {
	return int64(seed)<<48 + int64(rank+1)<<36 + int64(it)<<20 + int64(i)
}

// childLoop runs AllReduce, AllGather and Barrier with data that belongs to
// its job, and checks every result.
func childLoop(ctx context.Context, c *shm.Comm) int {
	seed, _ := strconv.Atoi(os.Getenv(envSeed))
	iters, _ := strconv.Atoi(os.Getenv(envIters))
	rank, size := c.Rank(), c.Size()
	x := make([]int64, loopCount)
	sum := make([]int64, loopCount)
	all := make([]int64, size*loopCount)
	for it := range iters {
		for i := range x {
			x[i] = loopValue(seed, rank, it, i)
		}
		if err := c.AllReduce(ctx, comm.Host(x), comm.Host(sum), comm.Sum); err != nil {
			fmt.Printf("rank %d: iteration %d: AllReduce: %v\n", rank, it, err)
			return 1
		}
		for i, got := range sum {
			var want int64
			for r := range size {
				want += loopValue(seed, r, it, i)
			}
			if got != want {
				fmt.Printf("rank %d: iteration %d: AllReduce: [%d] = %#x, want %#x\n", rank, it, i, got, want)
				return 1
			}
		}
		if err := c.AllGather(ctx, comm.Host(x), comm.Host(all)); err != nil {
			fmt.Printf("rank %d: iteration %d: AllGather: %v\n", rank, it, err)
			return 1
		}
		for j, got := range all {
			if want := loopValue(seed, j/loopCount, it, j%loopCount); got != want {
				fmt.Printf("rank %d: iteration %d: AllGather: [%d] = %#x, want %#x\n", rank, it, j, got, want)
				return 1
			}
		}
		if err := c.Barrier(ctx); err != nil {
			fmt.Printf("rank %d: iteration %d: Barrier: %v\n", rank, it, err)
			return 1
		}
	}
	if err := c.Close(); err != nil {
		fmt.Printf("rank %d: Close: %v\n", rank, err)
		return 1
	}
	fmt.Println("LOOP-OK")
	return 0
}

// proc is one child process: one rank of a job.
type proc struct {
	rank   int
	cmd    *exec.Cmd
	out    procgroup.Buffer
	done   chan struct{} // closed when the process has exited and been reaped
	err    error         // cmd.Wait's error, set before done is closed
	exited time.Time     // set before done is closed
}

// job is a set of child processes that form one communicator (or part of
// one: ranks that are never started are missing on purpose).
type job struct {
	t     *testing.T
	ns    string
	size  int
	procs []*proc
}

// startJob starts the given ranks of a world of size in namespace ns, each
// running role, with env added to this process's environment. Every child
// is in its own process group; whatever is still running when the test ends
// is killed.
func startJob(t *testing.T, ns string, size int, ranks []int, role string, env ...string) *job {
	t.Helper()
	j := &job{t: t, ns: ns, size: size}
	t.Cleanup(j.killAll)
	for _, r := range ranks {
		p := &proc{rank: r, done: make(chan struct{})}
		p.cmd = exec.Command(os.Args[0], "-test.run=^$")
		p.cmd.Env = append(os.Environ(),
			envRole+"="+role, envNS+"="+ns, envRank+"="+strconv.Itoa(r), envSize+"="+strconv.Itoa(size))
		p.cmd.Env = append(p.cmd.Env, env...)
		p.cmd.Stdout = &p.out
		p.cmd.Stderr = &p.out
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := p.cmd.Start(); err != nil {
			t.Fatalf("starting rank %d: %v", r, err)
		}
		j.procs = append(j.procs, p)
		go func() {
			p.err = p.cmd.Wait()
			p.exited = time.Now()
			close(p.done)
		}()
	}
	return j
}

// rank returns the process of rank r.
func (j *job) rank(r int) *proc {
	for _, p := range j.procs {
		if p.rank == r {
			return p
		}
	}
	j.t.Fatalf("rank %d was not started", r)
	return nil
}

// signal sends sig to rank r's process; for SIGKILL it waits until the
// process is reaped (a zombie still has its pid). It returns when sig was sent.
func (j *job) signal(r int, sig syscall.Signal) time.Time {
	p := j.rank(r)
	if err := syscall.Kill(p.cmd.Process.Pid, sig); err != nil {
		j.t.Fatalf("kill -%d rank %d (pid %d): %v", sig, r, p.cmd.Process.Pid, err)
	}
	at := time.Now()
	if sig == syscall.SIGKILL {
		<-p.done
	}
	return at
}

// killAll kills the process group of every child still running.
func (j *job) killAll() {
	for _, p := range j.procs {
		select {
		case <-p.done:
			continue
		default:
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// wait waits up to d for every process of the job to exit; on a timeout it
// kills them and fails the test.
func (j *job) wait(d time.Duration) {
	j.t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for _, p := range j.procs {
		select {
		case <-p.done:
		case <-timer.C:
			j.killAll()
			j.t.Fatalf("the job did not end within %v; killed it\n%s", d, j.output())
		}
	}
}

// failed returns a line per process that did not exit with status 0.
func (j *job) failed() []string {
	var out []string
	for _, p := range j.procs {
		<-p.done
		if p.err != nil {
			out = append(out, fmt.Sprintf("rank %d (pid %d): %v", p.rank, p.cmd.Process.Pid, p.err))
		}
	}
	return out
}

// output is every child's output, rank by rank.
func (j *job) output() string {
	var b strings.Builder
	for _, p := range j.procs {
		fmt.Fprintf(&b, "--- rank %d of %s (pid %d) ---\n%s", p.rank, j.ns, p.cmd.Process.Pid, p.out.String())
	}
	return b.String()
}

// waitFor polls cond every 10 ms until it holds or d has passed.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// requireNoSegments fails the test if namespace ns has a file in /dev/shm.
func requireNoSegments(t *testing.T, ns, when string) {
	t.Helper()
	segs, err := shm.Segments(ns)
	if err != nil {
		t.Fatalf("shm.Segments(%q): %v", ns, err)
	}
	if len(segs) > 0 {
		t.Errorf("%s: segments of %s are left in /dev/shm: %v", when, ns, segs)
	}
}
