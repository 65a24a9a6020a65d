package hiercomm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/hierarchy"
)

// growRank is a member of TestGrowWorld's job: Init, AllReduces until
// rank 1 is killed, Shrink, then Grow until the replacement is admitted,
// and the conformance suite on the grown World.
func growRank() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, err := hiercomm.Init(ctx, hiercomm.Options{Detector: testDetector()})
	if err != nil {
		return err
	}
	defer w.Close()
	rank := w.Rank()
	x := make([]float64, 4099)
	for i := 0; ; i++ {
		for j := range x {
			x[j] = float64(rank*len(x) + j)
		}
		err := w.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum)
		if i == 2 {
			fmt.Println("grow-ready")
		}
		if err != nil {
			if !errors.Is(err, comm.ErrPeerFailed) {
				return fmt.Errorf("AllReduce: %w, want ErrPeerFailed", err)
			}
			break
		}
	}
	s, err := w.Shrink(ctx)
	if err != nil {
		return err
	}
	sw := s.(*hiercomm.World)
	defer sw.Close()
	fmt.Printf("grow-shrunk: rank %d -> %d of %d\n", rank, sw.Rank(), sw.Size())
	// Grow until the replacement is there: every member sees the same
	// answer each time (rank 0's), so all call Grow equally often.
	var g *hiercomm.World
	start := time.Now()
	fault := os.Getenv(envGrowFault) != ""
	var took time.Duration
	for {
		call := time.Now()
		g, err = sw.Grow(ctx, 0)
		took = time.Since(call)
		if err != nil && fault {
			// A process was killed during Grow: every member returns
			// an error, and the World grown out of is usable unless it
			// lost a member itself.
			fmt.Printf("grow-error: rank %d after %v: %v\n", rank, time.Since(start).Round(time.Millisecond), err)
			y := []float64{float64(sw.Rank())}
			if err := sw.AllReduce(ctx, comm.Host(y), comm.Host(y), comm.Sum); err == nil {
				fmt.Printf("grow-failed-usable: rank %d (sum %v)\n", rank, y[0])
			}
			return nil
		}
		if err != nil {
			return err
		}
		if g != sw {
			break
		}
		if fault && time.Since(start) > 20*time.Second {
			fmt.Printf("grow-nobody: rank %d\n", rank) // it died before it was admitted
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer g.Close()
	err = grownChecks(ctx, g, fmt.Sprintf("rank %d", rank), took)
	if err != nil && fault {
		fmt.Printf("grown-then-failed: rank %d: %v\n", rank, err)
		return nil
	}
	return err
}

// envGrowFault says that TestGrowFaults kills a process during Grow.
const envGrowFault = "HIERCOMM_TEST_GROW_FAULT"

// growNewcomer is the replacement TestGrowWorld starts: Init joins the
// running job and returns once the members grew.
func growNewcomer() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	w, err := hiercomm.Init(ctx, hiercomm.Options{Detector: testDetector()})
	if err != nil {
		return err
	}
	defer w.Close()
	return grownChecks(ctx, w, "newcomer", time.Since(start))
}

// grownChecks runs the conformance suite, with rank-distinct data, on a
// grown World, and says which rank of it this process is.
func grownChecks(ctx context.Context, g *hiercomm.World, who string, took time.Duration) error {
	opt := commtest.Options{Timeout: time.Minute, Counts: []int{0, 1, 7, 4099}}
	for _, s := range []struct {
		name string
		run  func(context.Context, comm.Communicator, commtest.Options) error
	}{
		{"conformance", commtest.RunRank},
		{"p2p", commtest.P2PRank},
		{"split", commtest.SplitRank},
	} {
		if err := s.run(ctx, g, opt); err != nil {
			return fmt.Errorf("%s on the grown world: %w", s.name, err)
		}
	}
	intra := "-"
	if h, ok := g.Communicator.(*hierarchy.Comm); ok {
		p, _ := h.Parts()
		intra = fmt.Sprintf("%T", p)
	}
	fmt.Printf("grown: %s is rank %d of %d on %d nodes (%T, intra %s), local %d of %d, in %v\n", who, g.Rank(), g.Size(), g.Topology().NumNodes(),
		g.Communicator, intra, g.LocalRank(), g.LocalSize(), took.Round(time.Millisecond))
	return nil
}

// A rank of a 2 × 2 World is killed; the survivors Shrink to 3 and a
// replacement, started on the dead rank's node with HIERCOMM_JOIN=running,
// joins the running job: the members Grow, and all four — the three
// members keeping their ranks, the newcomer after them, on its node —
// pass the conformance suite on the grown World: the hierarchy again,
// with shared memory within each node. The same over QUIC, on 2 + 3
// nodes, on 4 × 4, with the replacement on a new node (a node added to
// every rail), on three nodes of one rank (the flat world) and on one
// node (shared memory alone).
func TestGrowWorld(t *testing.T) {
	for _, tc := range []struct {
		network string
		layout  []int
		victim  int
		node    int // where the replacement starts
	}{
		{"tcp", []int{2, 2}, 1, 0},
		{"quic", []int{2, 2}, 2, 1},
		{"tcp", []int{2, 3}, 3, 1},
		{"tcp", []int{2, 2}, 3, 2}, // on a new node
		{"tcp", []int{1, 1, 1}, 1, 1},
		{"tcp", []int{4, 4}, 5, 1},
		{"tcp", []int{3}, 1, 0},
	} {
		t.Run(fmt.Sprintf("%s/%v/node%d", tc.network, tc.layout, tc.node), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			n := 0
			for _, g := range tc.layout {
				n += g
			}
			out := &lines{marker: "grow-ready", ch: make(chan struct{}, 8)}
			// The membership's default timings: the test's fast ones took a
			// member starved of CPU for dead (4 x 4 and the replacement
			// under the race detector on 2 cores), and nothing here waits
			// for the membership to see a death (the transport sees the
			// kill at once).
			spec := cluster.LocalSpec{RanksPerNode: tc.layout, Network: tc.network, KeepOthers: true, Env: []string{"HIERCOMM_TEST_DEFAULT_DETECTOR=1"}}
			job := startJob(t, ctx, spec, "grow", out)
			killWhenReady(t, ctx, job, out, n, tc.victim)
			waitFor(t, out, "grow-shrunk:", n-1)
			if err := startNewcomer(t, ctx, job, tc.node, out).Wait(); err != nil {
				t.Errorf("the newcomer: %v", err)
				job.Stop(syscall.SIGKILL) // the members would wait for it to their deadline
			}
			for r, err := range job.Errors() {
				if err != nil && r != tc.victim {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			text := out.String()
			nodes := max(len(tc.layout), tc.node+1)
			via := "*hierarchy.Comm, intra *shm.Comm"
			switch {
			case nodes == 1:
				via = "*shm.Comm, intra -"
			case nodes == n:
				via = "*nexar.Comm, intra -"
			}
			for r := range n {
				who := "newcomer"
				if r < n-1 {
					who = fmt.Sprintf("rank %d", r)
					if r >= tc.victim {
						who = fmt.Sprintf("rank %d", r+1)
					}
				}
				want := fmt.Sprintf("grown: %s is rank %d of %d on %d nodes (%s)", who, r, n, nodes, via)
				if !strings.Contains(text, want) {
					t.Errorf("no %q", want)
				}
			}
			if t.Failed() {
				t.Fatal(tail(text, 120))
			}
			t.Log(text)
		})
	}
}

// A process is killed while the others Grow: the replacement, or a
// member, as soon as the members see the replacement waiting. Whatever
// step of Grow it dies in, no process hangs: every member returns from
// Grow (an error, and the World grown out of still usable when it lost
// none of its own; or nobody to admit; or a grown World whose first
// collectives fail), well before any deadline, and the replacement's
// Init returns too.
func TestGrowFaults(t *testing.T) {
	for _, victim := range []string{"newcomer", "member"} {
		t.Run(victim, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out := &lines{marker: "grow-ready", ch: make(chan struct{}, 8)}
			spec := cluster.LocalSpec{RanksPerNode: []int{2, 2}, Network: "tcp", KeepOthers: true, Env: []string{envGrowFault + "=1"}}
			job := startJob(t, ctx, spec, "grow", out)
			killWhenReady(t, ctx, job, out, 4, 1)
			waitFor(t, out, "grow-shrunk:", 3)
			cmd := startNewcomer(t, ctx, job, 0, out)
			waitFor(t, out, "a process waits to join the running job", 1)
			start := time.Now()
			if victim == "newcomer" {
				cmd.Process.Kill()
			} else if err := job.Kill(3); err != nil {
				t.Fatal(err)
			}
			newcomerErr := cmd.Wait()
			errs := job.Errors()
			took := time.Since(start)
			text := out.String()
			for r, err := range errs {
				if err != nil && r != 1 && !(victim == "member" && r == 3) {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			survivors := []int{0, 2, 3}
			if victim == "member" {
				survivors = []int{0, 2}
				if newcomerErr == nil && !strings.Contains(text, "[newcomer] grown-then-failed") && !strings.Contains(text, "[newcomer] FAIL") {
					t.Errorf("the newcomer's Init succeeded and it saw no failure after a member died")
				}
			}
			for _, r := range survivors {
				ended := false
				for _, how := range []string{"grow-error: rank %d", "grow-nobody: rank %d", "grown-then-failed: rank %d", "grown: rank %d"} {
					ended = ended || strings.Contains(text, fmt.Sprintf(how, r))
				}
				if !ended {
					t.Errorf("rank %d did not say how its Grow ended", r)
				}
				if strings.Contains(text, fmt.Sprintf("grow-error: rank %d", r)) && victim == "newcomer" && !strings.Contains(text, fmt.Sprintf("grow-failed-usable: rank %d", r)) {
					t.Errorf("rank %d: the World grown out of is not usable after the newcomer died during Grow", r)
				}
			}
			if t.Failed() {
				t.Fatal(tail(text, 120))
			}
			t.Logf("every process ended %v after the kill\n%s", took.Round(time.Millisecond), text)
		})
	}
}

// waitFor waits until out holds what n times, at most a minute.
func waitFor(t *testing.T, out *lines, what string, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); strings.Count(out.String(), what) < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%q never came %d times\n%s", what, n, tail(out.String(), 60))
		}
	}
}

// startNewcomer starts this test binary as a process that joins job's
// running world on node, in role grow-newcomer; its lines go to out.
func startNewcomer(t *testing.T, ctx context.Context, job *cluster.LocalJob, node int, out *lines) *exec.Cmd {
	t.Helper()
	return startJoiner(t, ctx, job, node, out, "grow-newcomer")
}

// startJoiner starts this test binary, in role, as a process that joins
// job's running world on node; its lines go to out.
func startJoiner(t *testing.T, ctx context.Context, job *cluster.LocalJob, node int, out *lines, role string) *exec.Cmd {
	t.Helper()
	env, err := job.JoinerEnv(node)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	cmd.Env = append(env, envRole+"="+role)
	nw := &prefixed{prefix: "[newcomer] ", w: out}
	cmd.Stdout, cmd.Stderr = nw, nw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// prefixed writes each line to w with prefix.
type prefixed struct {
	prefix string
	w      *lines
	part   string
}

func (p *prefixed) Write(b []byte) (int, error) {
	s := p.part + string(b)
	i := strings.LastIndexByte(s, '\n')
	p.part = s[i+1:]
	if i >= 0 {
		var out strings.Builder
		for l := range strings.SplitSeq(s[:i], "\n") {
			out.WriteString(p.prefix + l + "\n")
		}
		p.w.Write([]byte(out.String()))
	}
	return len(b), nil
}
