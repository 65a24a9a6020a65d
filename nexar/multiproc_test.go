package nexar_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/internal/nexarjob"
	"github.com/hiercomm/hiercomm/internal/procgroup"
	"github.com/hiercomm/hiercomm/nexar"
)

// The multi-process tests start this test binary again as every rank of a
// local job (nexarjob.Start); TestMain sends those children to their role.
const envRole = "NEXAR_TEST_ROLE"

func TestMain(m *testing.M) {
	if nexarjob.IsChild(os.Getenv) {
		os.Exit(child(os.Getenv(envRole)))
	}
	os.Exit(m.Run())
}

func child(role string) int {
	ctx := context.Background()
	cfg, err := nexarjob.Config(os.Getenv, nexar.Options{Timeout: 2 * time.Minute, ProbeAfter: 200 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	switch role {
	case "fault", "shrink":
		cfg.Net.FailureTimeout = 2 * time.Second
	case "stall", "shrink-stall":
		cfg.Net.FailureTimeout = time.Second
	}
	c, err := nexar.Connect(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		return 2
	}
	defer c.Close()
	switch role {
	case "shrink":
		return shrinkChild(ctx, c)
	case "shrink-stall":
		return shrinkStalledChild(ctx, c)
	case "conformance":
		counts := []int{0, 1, 7, 1000003}
		if s := os.Getenv("NEXAR_TEST_COUNTS"); s != "" {
			counts = nil
			for _, f := range strings.Split(s, ",") {
				n, _ := strconv.Atoi(f)
				counts = append(counts, n)
			}
		}
		if err := commtest.RunRank(ctx, c, commtest.Options{Counts: counts}); err != nil {
			fmt.Fprintln(os.Stderr, "conformance:", err)
			return 1
		}
		fmt.Println("conformance passed")
		return 0
	case "fault":
		// Run AllReduces until the launcher kills rank 1; survivors must
		// each return an error that names the dead rank, within the bound.
		x := make([]float32, 1<<20)
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
			fmt.Printf("SURVIVOR-ERROR after %v: %v\n", took.Round(time.Millisecond), err)
			if !errors.Is(err, comm.ErrPeerFailed) && !errors.Is(err, comm.ErrPeerAbandoned) && !errors.Is(err, comm.ErrAborted) {
				fmt.Println("wrong error kind")
				return 1
			}
			if !strings.Contains(err.Error(), "rank 1") {
				fmt.Println("error does not name rank 1")
				return 1
			}
			if took > 10*time.Second {
				fmt.Println("too slow")
				return 1
			}
			return 0
		}
	case "stall":
		// Run AllReduces until one fails (the launcher stops rank 2 for
		// longer than FailureTimeout, then continues it), and say whom
		// the error blames.
		for i := 0; ; i++ {
			x := make([]float32, 1024)
			err := c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum)
			if i == 3 {
				fmt.Println("READY")
			}
			if err == nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			var oe *comm.OpError
			culprit, known := -1, false
			if errors.As(err, &oe) {
				culprit, known = oe.Culprit()
			}
			fmt.Printf("STALL-ERROR rank=%d culprit=%d known=%v stalled=%v peerfailed=%v: %v\n", c.Rank(), culprit, known,
				errors.Is(err, nexar.ErrStalled), errors.Is(err, comm.ErrPeerFailed), err)
			return 0
		}
	}
	fmt.Fprintln(os.Stderr, "unknown role", role)
	return 2
}

// TestConformanceMultiProcess runs the conformance suite over real QUIC (and
// TCP) between processes. Without the race detector it covers every world
// size of worldSizes with the full counts (make test runs it so, after the
// race pass); under it, where quic-go moves a few MB/s, a smaller matrix.
func TestConformanceMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process conformance is not short")
	}
	type world struct {
		network string
		ranks   int
		counts  string // empty: the suite's defaults, 0, 1, 7, 1000003
	}
	worlds := []world{{"quic", 1, ""}, {"quic", 2, ""}, {"quic", 3, ""}, {"quic", 4, ""}, {"quic", 5, ""}, {"quic", 8, ""}, {"tcp", 4, ""}}
	if raceEnabled {
		worlds = []world{{"quic", 4, "0,1,7,4099"}, {"quic", 3, "0,1,7,4099"}, {"tcp", 5, "0,1,7,4099"}}
	}
	for _, tc := range worlds {
		t.Run(fmt.Sprintf("%s/%d", tc.network, tc.ranks), func(t *testing.T) {
			var out procgroup.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			job, err := nexarjob.Start(ctx, nexarjob.Spec{
				Ranks: tc.ranks, Network: tc.network, Args: []string{"-test.run=^$"},
				Env:    []string{envRole + "=conformance", "NEXAR_TEST_COUNTS=" + tc.counts},
				Stdout: &out, Stderr: &out,
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := job.Wait(); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if got := strings.Count(out.String(), "conformance passed"); got != tc.ranks {
				t.Fatalf("%d of %d ranks passed\n%s", got, tc.ranks, out.String())
			}
		})
	}
}

// TestKilledRankIsReportedByEverySurvivor: rank 1 is killed (SIGKILL) in
// the middle of AllReduces; every survivor's call fails naming it. Where a
// TCP connection carries the pair (tcp, and quic's TLS lane), the kernel
// ends it with the process, so the survivors know within a second, long
// before the failure timeout (2 s) that is QUIC's only sign (quic-only).
func TestKilledRankIsReportedByEverySurvivor(t *testing.T) {
	for _, network := range []string{"quic", "quic-only", "tcp"} {
		t.Run(network, func(t *testing.T) {
			var out procgroup.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			job, err := nexarjob.Start(ctx, nexarjob.Spec{
				Ranks: 4, Network: network, Args: []string{"-test.run=^$"}, KeepOthers: true,
				Env: []string{envRole + "=fault"}, Stdout: &out, Stderr: &out,
			})
			if err != nil {
				t.Fatal(err)
			}
			awaitReady(t, &out, 4)
			if err := job.Kill(1); err != nil {
				t.Fatal(err)
			}
			errs := job.Errors()
			for r, err := range errs {
				if r != 1 && err != nil {
					t.Errorf("survivor rank %d: %v", r, err)
				}
			}
			if errs[1] == nil {
				t.Errorf("rank 1 was not killed")
			}
			if got := strings.Count(out.String(), "SURVIVOR-ERROR"); got != 3 {
				t.Errorf("%d survivors reported the failure, want 3", got)
			}
			if network != "quic-only" {
				for _, m := range regexp.MustCompile(`SURVIVOR-ERROR after ([^:]+):`).FindAllStringSubmatch(out.String(), -1) {
					if d, err := time.ParseDuration(m[1]); err != nil || d >= time.Second {
						t.Errorf("a survivor's AllReduce failed %s after it began: over %s the death should be seen within a second (the TCP connection's end), not at the failure timeout", m[1], network)
					}
				}
			}
			t.Logf("\n%s", out.String())
		})
	}
}

// A rank stopped (SIGSTOP) for longer than FailureTimeout and then
// continued: its peers give it up and name it; it must learn that it was
// the one that failed (stalled, expelled), not blame a peer whose
// connection happened to time out first.
func TestStalledRankLearnsItWasExpelled(t *testing.T) {
	// Over QUIC the peers' idle timeout sees the stall (network quic: or
	// its TLS lane's heartbeats, whichever first); over TCP, whose
	// kernel still acknowledges a stopped process's data and keepalives,
	// the transport's heartbeats do.
	for _, network := range []string{"quic", "quic-only", "tcp"} {
		t.Run(network, func(t *testing.T) {
			text := runWithAStall(t, network, "stall", 3)
			for r := range 3 {
				want := fmt.Sprintf("STALL-ERROR rank=%d culprit=2 known=true stalled=%v peerfailed=true", r, r == 2)
				if !strings.Contains(text, want) {
					t.Errorf("rank %d did not report %q", r, want)
				}
			}
			t.Logf("\n%s", text)
		})
	}
}
