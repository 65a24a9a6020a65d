package nexar_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/internal/nexarjob"
	"github.com/hiercomm/hiercomm/internal/procgroup"
	"github.com/hiercomm/hiercomm/nexar"
)

// envShrink says how rank 1 leaves a shrink test's job: "kill" (the test
// sends it SIGKILL), "close" (it closes its communicator and exits) or
// "cancel" (it cancels a collective and stays: nothing fails).
const envShrink = "NEXAR_TEST_SHRINK"

// shrinkChild is a rank of a shrink test: AllReduces with rank-distinct
// data until one fails, then Shrink, and the checks of
// commtest.ShrunkRank on the result.
func shrinkChild(ctx context.Context, c *nexar.Comm) int {
	how := os.Getenv(envShrink)
	P, r := c.Size(), c.Rank()
	want := []int{}
	for i := range P {
		if i != 1 || how == "cancel" {
			want = append(want, i)
		}
	}
	x := make([]float64, 1<<14)
	for i := 0; ; i++ {
		cctx, cancel := context.WithCancel(ctx)
		if i == 4 && r == 1 {
			switch how {
			case "close":
				fmt.Println("CLOSING")
				cancel()
				c.Close()
				return 0
			case "cancel":
				cancel()
			}
		}
		for j := range x {
			x[j] = float64(r*len(x) + j)
		}
		err := c.AllReduce(cctx, comm.Host(x), comm.Host(x), comm.Sum)
		cancel()
		if i == 3 {
			fmt.Println("READY")
		}
		if err == nil {
			for j := range x {
				if want := float64(P*j + len(x)*P*(P-1)/2); x[j] != want {
					fmt.Printf("AllReduce gave %v at %d, want %v\n", x[j], j, want)
					return 1
				}
			}
			continue
		}
		fmt.Printf("FAILED %v: %v\n", errors.Is(err, comm.ErrPeerFailed) || errors.Is(err, comm.ErrCanceled), err)
		break
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	s, err := c.Shrink(sctx)
	if err != nil {
		fmt.Println("SHRINK-ERROR:", err)
		return 1
	}
	took := time.Since(start)
	defer s.Close()
	if err := commtest.ShrunkRank(sctx, s, r, want); err != nil {
		fmt.Println("SHRUNK-WRONG:", err)
		return 1
	}
	start = time.Now()
	c.Close() // the old one first: the new one keeps the transport
	fmt.Printf("SHRUNK rank %d -> %d of %d in %v; the old one closed in %v\n", r, s.Rank(), s.Size(), took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if err := s.Barrier(sctx); err != nil {
		fmt.Println("SHRUNK-WRONG after closing the old:", err)
		return 1
	}
	return 0
}

// Real processes over QUIC and TCP: rank 1 of 4 is killed, closes its
// communicator, or only cancels a collective; every survivor Shrinks and
// gets the same membership (1 gone, or with nothing failed a copy of all
// 4), new ranks in order, exact collectives, and no rank hangs.
func TestShrinkMultiProcess(t *testing.T) {
	for _, network := range []string{"quic", "tcp"} {
		for _, how := range []string{"kill", "close", "cancel"} {
			t.Run(network+"/"+how, func(t *testing.T) {
				var out procgroup.Buffer
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				job, err := nexarjob.Start(ctx, nexarjob.Spec{
					Ranks: 4, Network: network, Args: []string{"-test.run=^$"}, KeepOthers: true,
					Env: []string{envRole + "=shrink", envShrink + "=" + how}, Stdout: &out, Stderr: &out,
				})
				if err != nil {
					t.Fatal(err)
				}
				if how == "kill" {
					awaitReady(t, &out, 4)
					if err := job.Kill(1); err != nil {
						t.Fatal(err)
					}
				}
				errs := job.Errors()
				text := out.String()
				for r, err := range errs {
					if err != nil && !(r == 1 && how == "kill") {
						t.Errorf("rank %d: %v", r, err)
					}
				}
				survivors := []int{0, 2, 3}
				if how == "cancel" {
					survivors = []int{0, 1, 2, 3}
				}
				for i, r := range survivors {
					if want := fmt.Sprintf("[rank %d] SHRUNK rank %d -> %d of %d", r, r, i, len(survivors)); !strings.Contains(text, want) {
						t.Errorf("no %q", want)
					}
				}
				if n := strings.Count(text, "FAILED true"); n != len(survivors) {
					t.Errorf("%d ranks saw the failure as ErrPeerFailed or ErrCanceled, want %d", n, len(survivors))
				}
				if slices.ContainsFunc(strings.Split(text, "\n"), func(l string) bool { return strings.Contains(l, "WRONG") }) || t.Failed() {
					t.Errorf("\n%s", text)
				}
				t.Logf("\n%s", text)
			})
		}
	}
}

// shrinkStalledChild is a rank of TestShrinkLeavesOutAStalledRank:
// AllReduces until one fails (the test stops rank 2 past the failure
// timeout), then Shrink, and what came of it.
func shrinkStalledChild(ctx context.Context, c *nexar.Comm) int {
	for i := 0; ; i++ {
		x := make([]float32, 1024)
		err := c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum)
		if i == 3 {
			fmt.Println("READY")
		}
		if err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := c.Shrink(sctx)
	if err != nil {
		fmt.Printf("SHRINK-ERROR rank %d stalled=%v peerfailed=%v: %v\n", c.Rank(), errors.Is(err, nexar.ErrStalled), errors.Is(err, comm.ErrPeerFailed), err)
		return 0
	}
	defer s.Close()
	if err := commtest.ShrunkRank(sctx, s, c.Rank(), []int{0, 1}); err != nil {
		fmt.Println("SHRUNK-WRONG:", err)
		return 1
	}
	fmt.Printf("SHRUNK rank %d -> %d of %d\n", c.Rank(), s.Rank(), s.Size())
	return 0
}

// Rank 2 of 3 is stopped (SIGSTOP) past the failure timeout and then
// continued (QUIC: over TCP a stopped process's kernel still answers):
// ranks 0 and 1 Shrink to the two of them, and rank 2 learns from its
// Shrink that it was the one given up, instead of agreeing with itself
// alone on a communicator of one.
func TestShrinkLeavesOutAStalledRank(t *testing.T) {
	text := runWithAStall(t, "quic", "shrink-stall", 3)
	for _, want := range []string{"[rank 0] SHRUNK rank 0 -> 0 of 2", "[rank 1] SHRUNK rank 1 -> 1 of 2", "[rank 2] SHRINK-ERROR rank 2 stalled=true peerfailed=true"} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q", want)
		}
	}
	if t.Failed() {
		t.Fatal(text)
	}
	t.Log(text)
}

// runWithAStall runs a local job of n ranks in role over network, stops
// its last rank (SIGSTOP) for 3 s once every rank printed READY (the
// roles' FailureTimeout is 1 s), continues it, and returns the job's
// output once every rank has exited; a rank that fails fails t.
func runWithAStall(t *testing.T, network, role string, n int) string {
	t.Helper()
	var out procgroup.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	job, err := nexarjob.Start(ctx, nexarjob.Spec{
		Ranks: n, Network: network, Args: []string{"-test.run=^$"}, KeepOthers: true,
		Env: []string{envRole + "=" + role}, Stdout: &out, Stderr: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	awaitReady(t, &out, n)
	if err := job.Signal(n-1, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if err := job.Signal(n-1, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for r, err := range job.Errors() {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	return out.String()
}

// awaitReady waits until n ranks have printed READY to out.
func awaitReady(t *testing.T, out *procgroup.Buffer, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for strings.Count(out.String(), "READY") < n {
		if time.Now().After(deadline) {
			t.Fatalf("ranks never got going:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
