package hiercomm_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/topology"
)

// These tests start real processes through the local launcher (emulated
// nodes, the variables of each launcher style) and run hiercomm.Init in
// each. The test binary is the program: envRole says which part to play.
const envRole = "HIERCOMM_TEST_ROLE"

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		if err := child(role); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func child(role string) error {
	switch role {
	case "agree":
		return agree()
	case "kill":
		return killed()
	case "conformance":
		return conformance()
	case "shrink":
		return shrinkRank()
	case "grow":
		return growRank()
	case "grow-newcomer":
		return growNewcomer()
	case "initclose":
		// A rank with nothing to do may leave right after joining; the
		// others, maybe still forming the mesh, must not fail for it.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		w, err := hiercomm.Init(ctx, hiercomm.Options{})
		if err != nil {
			return err
		}
		return w.Close()
	}
	if ran, err := gpuChild(role); ran {
		return err
	}
	return fmt.Errorf("unknown role %q", role)
}

// testDetector makes a dead process show within a few seconds on
// loopback; with HIERCOMM_TEST_DEFAULT_DETECTOR=1 (inherited by the
// children) the kill test measures the default timings instead.
func testDetector() cluster.Detector {
	if os.Getenv("HIERCOMM_TEST_DEFAULT_DETECTOR") == "1" {
		return cluster.Detector{}
	}
	return cluster.Detector{ProbeInterval: 200 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond, GossipInterval: 50 * time.Millisecond}
}

// envInt reads the first of names that is set, or -1.
func envInt(names ...string) int {
	for _, n := range names {
		if v, err := strconv.Atoi(os.Getenv(n)); err == nil {
			return v
		}
	}
	return -1
}

// agree joins the job, checks that the topology says what the launcher
// set up, that every rank holds the same topology and sees the others
// where they are, and that an AllReduce of rank-distinct data is exact.
func agree() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := hiercomm.Init(ctx, hiercomm.Options{})
	if err != nil {
		return err
	}
	defer w.Close()
	t, rank := w.Topology(), w.Rank()
	if want := envInt("RANK", "SLURM_PROCID"); want >= 0 && rank != want {
		return fmt.Errorf("rank %d, but the launcher started this process as rank %d", rank, want)
	}
	if want := envInt("GROUP_RANK", "SLURM_NODEID", "JOB_COMPLETION_INDEX"); w.Node() != want {
		return fmt.Errorf("rank %d: node %d, but it runs on emulated node %d", rank, w.Node(), want)
	}
	if want := envInt("LOCAL_RANK", "SLURM_LOCALID"); w.LocalRank() != want {
		return fmt.Errorf("rank %d: local rank %d, want %d", rank, w.LocalRank(), want)
	}
	if want := envInt("WORLD_SIZE", "SLURM_NTASKS"); w.Size() != want || t.Size() != want {
		return fmt.Errorf("rank %d: world of %d (topology %d), want %d", rank, w.Size(), t.Size(), want)
	}
	dump, err := t.MarshalJSON()
	if err != nil {
		return err
	}
	h := fnv.New64a()
	h.Write(dump)
	// Every rank sends what it knows of itself; every rank checks all of
	// it against its own topology.
	const fields = 6
	mine := []int64{int64(rank), int64(w.Node()), int64(w.LocalRank()), int64(w.LocalSize()), int64(t.Lead(w.Node())), int64(h.Sum64() >> 1)}
	all := make([]int64, fields*w.Size())
	if err := w.AllGather(ctx, comm.Host(mine), comm.Host(all)); err != nil {
		return err
	}
	for r := range w.Size() {
		got := all[r*fields : (r+1)*fields]
		node := t.NodeOf(r)
		want := []int64{int64(r), int64(node), int64(t.LocalRank(r)), int64(t.LocalSize(r)), int64(t.Lead(node)), mine[5]}
		if !slices.Equal(got, want) {
			return fmt.Errorf("rank %d: rank %d reports [rank node local localSize lead topoHash] = %v, this rank's topology says %v", rank, r, got, want)
		}
	}
	n := 100003
	x := make([]int64, n)
	for i := range x {
		x[i] = int64(rank*n + i)
	}
	if err := w.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); err != nil {
		return err
	}
	p := int64(w.Size())
	for i, v := range x {
		if want := int64(n)*p*(p-1)/2 + p*int64(i); v != want {
			return fmt.Errorf("rank %d: AllReduce element %d = %d, want %d", rank, i, v, want)
		}
	}
	// The Plan says what was built.
	plan := w.Plan()
	if plan.Rank != rank || plan.Size != w.Size() || plan.Node != w.Node() || plan.LocalRank != w.LocalRank() || plan.Nodes != t.NumNodes() {
		return fmt.Errorf("rank %d: the Plan places it as rank %d of %d, node %d of %d, local rank %d", rank, plan.Rank, plan.Size, plan.Node, plan.Nodes, plan.LocalRank)
	}
	want := map[hiercomm.Layout]string{hiercomm.LayoutHierarchy: "*hierarchy.Comm", hiercomm.LayoutNode: "*shm.Comm", hiercomm.LayoutFlat: "*nexar.Comm"}[plan.Layout]
	if got := fmt.Sprintf("%T", w.Communicator); got != want {
		return fmt.Errorf("rank %d: the Plan's layout is %s, but Init built a %s", rank, plan.Layout, got)
	}
	if rank == 0 {
		fmt.Println(t)
	}
	fmt.Printf("agree ok: rank %d node %d local %d/%d via %T\n", rank, w.Node(), w.LocalRank(), w.LocalSize(), w.Communicator)
	return nil
}

// killed joins, then rank 1 waits to be killed while the others start an
// AllReduce that cannot finish without it. The transport's own timeout is
// long, so only the membership failure detector can end it.
func killed() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := hiercomm.Init(ctx, hiercomm.Options{Detector: testDetector(), FailureTimeout: 5 * time.Minute})
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Barrier(ctx); err != nil {
		return err
	}
	fmt.Println("kill-ready")
	if w.Rank() == 1 {
		<-ctx.Done()
		return errors.New("rank 1 was not killed")
	}
	x := make([]float32, 1000)
	err = w.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum)
	if !errors.Is(err, comm.ErrPeerFailed) || !strings.HasPrefix(err.Error(), "rank 1 ") {
		return fmt.Errorf("rank %d: AllReduce with rank 1 dead returned %v, want a failure naming rank 1 first", w.Rank(), err)
	}
	var oe *comm.OpError
	if !errors.As(err, &oe) {
		return fmt.Errorf("rank %d: %v is not an *comm.OpError", w.Rank(), err)
	}
	if r, ok := oe.Culprit(); !ok || r != 1 {
		return fmt.Errorf("rank %d: %v: Culprit() = %d, %v, want rank 1", w.Rank(), err, r, ok)
	}
	// The time it saw the failure, for the test to measure each
	// survivor's delay from the kill (the processes share a clock).
	fmt.Printf("failure seen at %d by rank %d: %v\n", time.Now().UnixNano(), w.Rank(), err)
	return nil
}

// survivorDelays says how long after killedAt each survivor saw the
// failure, from the "failure seen at" lines, first to last, with the
// spread between the first and the last.
func survivorDelays(out string, killedAt time.Time) string {
	var ds []time.Duration
	for _, line := range strings.Split(out, "\n") {
		_, rest, ok := strings.Cut(line, "failure seen at ")
		if !ok {
			continue
		}
		ns, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
		if err == nil {
			ds = append(ds, time.Unix(0, ns).Sub(killedAt).Round(time.Millisecond))
		}
	}
	if len(ds) == 0 {
		return "none reported"
	}
	slices.Sort(ds)
	return fmt.Sprintf("%v (spread %v)", ds, ds[len(ds)-1]-ds[0])
}

// lines is an io.Writer that keeps the output and counts lines that
// contain a marker.
type lines struct {
	mu     sync.Mutex
	out    strings.Builder
	marker string
	count  int
	ch     chan struct{} // gets a value for every marker line
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.out.Write(p)
	sc := bufio.NewScanner(strings.NewReader(string(p)))
	for sc.Scan() {
		if l.marker != "" && strings.Contains(sc.Text(), l.marker) {
			l.count++
			select {
			case l.ch <- struct{}{}:
			default:
			}
		}
	}
	return len(p), nil
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.out.String()
}

func startJob(t *testing.T, ctx context.Context, spec cluster.LocalSpec, role string, out io.Writer) *cluster.LocalJob {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec.Path, spec.Args = exe, []string{"-test.run=^$"}
	spec.Env = append(spec.Env, envRole+"="+role)
	spec.Stdout, spec.Stderr = out, out
	job, err := cluster.StartLocal(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	return job
}

func TestInitAgreesInEveryLauncherStyle(t *testing.T) {
	cases := []struct {
		name      string
		layout    []int
		style     string
		placement string
		network   string
		via       string // the communicator's type, as %T prints it
		env       []string
	}{
		{"torchrun 2x2", []int{2, 2}, "torchrun", "block", "quic", "*hierarchy.Comm", nil},
		{"slurm 2x2 cyclic", []int{2, 2}, "slurm", "cyclic", "quic", "*hierarchy.Comm", nil},
		{"kubernetes 2x2", []int{2, 2}, "kubernetes", "block", "quic", "*hierarchy.Comm", nil},
		{"torchrun 2+3", []int{2, 3}, "torchrun", "block", "tcp", "*hierarchy.Comm", nil},
		{"torchrun 2x2 intra nexar", []int{2, 2}, "torchrun", "block", "tcp", "*hierarchy.Comm", []string{launchenv.EnvIntra + "=nexar"}},
		{"slurm 3x1", []int{1, 1, 1}, "slurm", "block", "tcp", "*nexar.Comm", nil},
		{"kubernetes 1x3", []int{3}, "kubernetes", "block", "quic", "*shm.Comm", nil},
		{"kubernetes 3x1 indexed", []int{1, 1, 1}, "kubernetes", "block", "quic", "*nexar.Comm", nil},
		{"torchrun 1x4 shared memory", []int{4}, "torchrun", "block", "quic", "*shm.Comm", nil},
		{"slurm 1x3 intra nexar", []int{3}, "slurm", "block", "tcp", "*nexar.Comm", []string{launchenv.EnvIntra + "=nexar"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			out := &lines{marker: "agree ok", ch: make(chan struct{}, 1)}
			dump := filepath.Join(t.TempDir(), "topo.json")
			job := startJob(t, ctx, cluster.LocalSpec{RanksPerNode: tc.layout, Style: tc.style, Placement: tc.placement, Network: tc.network,
				Env: append([]string{launchenv.EnvTopoDumpFile + "=" + dump}, tc.env...)}, "agree", out)
			if err := job.Wait(); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			n := 0
			for _, g := range tc.layout {
				n += g
			}
			if out.count != n {
				t.Fatalf("%d of %d ranks reported agreement\n%s", out.count, n, out)
			}
			if got := strings.Count(out.String(), "via "+tc.via+"\n"); got != n {
				t.Errorf("%d of %d ranks ran on %s\n%s", got, n, tc.via, out)
			}
			if got := strings.Count(out.String(), "hiercomm: plan: layout"); got != 1 {
				t.Errorf("the plan's layout was logged %d times, want once (rank 0)\n%s", got, out)
			}
			f, err := os.Open(dump)
			if err != nil {
				t.Fatalf("rank 0 wrote no topology dump: %v", err)
			}
			defer f.Close()
			topo, err := topology.Load(f)
			if err != nil {
				t.Fatalf("the topology dump does not load: %v", err)
			}
			if topo.Size() != n || topo.NumNodes() != len(tc.layout) {
				t.Errorf("the dump has %d ranks on %d nodes, want %d on %d", topo.Size(), topo.NumNodes(), n, len(tc.layout))
			}
			t.Log(out)
		})
	}
}

func TestInitThenCloseAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, layout := range [][]int{{2, 2}, {2, 2}, {3}, {3}} { // network, then shared memory
		out := &lines{}
		job := startJob(t, ctx, cluster.LocalSpec{RanksPerNode: layout}, "initclose", out)
		if err := job.Wait(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
}

func TestKilledProcessIsReportedOnEverySurvivor(t *testing.T) {
	// Two nodes: the ranks talk over QUIC, whose own timeout is set long,
	// so the membership failure detector must find the dead rank (or a
	// node-mate, through shared memory). Four nodes of one rank: a flat
	// QUIC world, where only the detector sees the death and the others
	// hear of it from the first survivor that knew. One node: shared
	// memory, which watches its peers' processes itself.
	for _, tc := range []struct {
		name   string
		layout []int
	}{{"2x2 network", []int{2, 2}}, {"4x1 flat network", []int{1, 1, 1, 1}}, {"1x4 shared memory", []int{4}}} {
		t.Run(tc.name, func(t *testing.T) { killOne(t, tc.layout) })
	}
}

func killOne(t *testing.T, layout []int) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := &lines{marker: "kill-ready", ch: make(chan struct{}, 8)}
	const n = 4
	job := startJob(t, ctx, cluster.LocalSpec{RanksPerNode: layout, KeepOthers: true}, "kill", out)
	for range n {
		select {
		case <-out.ch:
		case <-ctx.Done():
			t.Fatalf("the job never got ready\n%s", out)
		}
	}
	killedAt := time.Now()
	if err := job.Kill(1); err != nil {
		t.Fatal(err)
	}
	errs := job.Errors()
	took := time.Since(killedAt)
	for r, err := range errs {
		if r == 1 {
			if err == nil {
				t.Errorf("rank 1 exited 0, want killed")
			}
			continue
		}
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if t.Failed() {
		t.Fatal(out)
	}
	bound := testDetector().Bound(n)
	t.Logf("every survivor reported rank 1 %v after the kill (detector bound %v); each survivor's delay: %s\n%s", took, bound, survivorDelays(out.String(), killedAt), out)
	// The processes also leave and exit in this time, so allow a margin
	// for a loaded 2-core machine; this checks boundedness, not speed.
	if took > bound+20*time.Second {
		t.Errorf("the survivors took %v to report the dead rank, the detector's bound is %v", took, bound)
	}
}
