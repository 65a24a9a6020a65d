package nexar_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
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
	s, err := comm.Shrink(sctx, c)
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
				job, err := nexar.StartLocal(ctx, nexar.LocalSpec{
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
