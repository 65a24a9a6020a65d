package hiercomm_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/comm"
)

// Issue 28: Init and Close must not stall at the edges of a job. Each
// cycle is a small local job of real processes (the local launcher, as
// `hiercomm run` starts them) whose every rank calls Init, one AllReduce
// and Close, with the default detector, and reports how long Init and
// Close took. Any call over the limit (initCycleLimit), or a Close that
// fails, fails the test. HIERCOMM_INIT_CYCLES sets the number of cycles
// (default 20: about 35 s under the race detector); `make soak-init` runs
// 1,000.
const envInitCycles = "HIERCOMM_INIT_CYCLES"

// initCycleLimit is 1 s, or 2 s in a build with the race detector, which
// `make test` runs beside other packages' tests: the stalls this test is
// for took 5 s.
func initCycleLimit() time.Duration {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				return 2 * time.Second
			}
		}
	}
	return time.Second
}

// init plays the role of a rank of a cycle: TestMain's roles are in
// init_test.go, and this one needs nothing else of the test binary.
func init() {
	if os.Getenv(envRole) != "initcycle" {
		return
	}
	if err := initCycle(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// initCycle is one rank of a cycle: it times Init and Close and prints
// one "initcycle" line. A failed call is an error (the process exits 1).
func initCycle() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	w, err := hiercomm.Init(ctx, hiercomm.Options{})
	initTook := time.Since(start)
	if err != nil {
		return fmt.Errorf("Init failed after %v: %w", initTook, err)
	}
	x := []int64{1}
	if err := w.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); err != nil {
		w.Close()
		return fmt.Errorf("rank %d: AllReduce: %w", w.Rank(), err)
	}
	if x[0] != int64(w.Size()) {
		w.Close()
		return fmt.Errorf("rank %d: AllReduce of ones gave %d, want %d", w.Rank(), x[0], w.Size())
	}
	start = time.Now()
	err = w.Close()
	closeTook := time.Since(start)
	fmt.Printf("initcycle: rank %d init %d close %d\n", w.Rank(), initTook.Nanoseconds(), closeTook.Nanoseconds())
	if err != nil {
		return fmt.Errorf("rank %d: Close failed after %v: %w", w.Rank(), closeTook, err)
	}
	return nil
}

var initCycleLine = regexp.MustCompile(`initcycle: rank (\d+) init (\d+) close (\d+)`)

func TestInitCloseCycles(t *testing.T) {
	cycles := 20
	if v := os.Getenv(envInitCycles); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of cycles ≥ 1", envInitCycles, v)
		}
		cycles = n
	}
	// The launcher styles in turn; the Kubernetes one (ranks assigned by
	// membership, one seed for all) as 2 × 3, where 2 of 34 runs stalled.
	jobs := []struct {
		name   string
		layout []int
		style  string
	}{
		{"torchrun 2x2", []int{2, 2}, "torchrun"},
		{"kubernetes 2x3", []int{3, 3}, "kubernetes"},
		{"slurm 2x2", []int{2, 2}, "slurm"},
	}
	limit := initCycleLimit()
	var inits, closes []time.Duration
	var slow []string
	start := time.Now()
	for i := range cycles {
		job := jobs[i%len(jobs)]
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out := &lines{}
		j := startJob(t, ctx, cluster.LocalSpec{RanksPerNode: job.layout, Style: job.style}, "initcycle", out)
		err := j.Wait()
		cancel()
		if err != nil {
			t.Fatalf("cycle %d (%s): %v\n%s", i, job.name, err, out)
		}
		n := 0
		for _, g := range job.layout {
			n += g
		}
		ms := initCycleLine.FindAllStringSubmatch(out.String(), -1)
		if len(ms) != n {
			t.Fatalf("cycle %d (%s): %d of %d ranks reported\n%s", i, job.name, len(ms), n, out)
		}
		stalled := false
		for _, m := range ms {
			in, _ := strconv.ParseInt(m[2], 10, 64)
			cl, _ := strconv.ParseInt(m[3], 10, 64)
			initTook, closeTook := time.Duration(in), time.Duration(cl)
			inits, closes = append(inits, initTook), append(closes, closeTook)
			if initTook > limit || closeTook > limit {
				slow = append(slow, fmt.Sprintf("cycle %d (%s) rank %s: Init %v, Close %v", i, job.name, m[1], initTook, closeTook))
				stalled = true
			}
		}
		if stalled {
			t.Logf("cycle %d (%s) stalled:\n%s", i, job.name, out)
		}
	}
	t.Logf("%d cycles in %v: %s", cycles, time.Since(start).Round(time.Second), cycleSummary(inits, closes, limit))
	if len(slow) > 0 {
		t.Errorf("%d calls took over %v:\n%s", len(slow), limit, strings.Join(slow, "\n"))
	}
}

// cycleSummary is the distribution of the Init and Close times.
func cycleSummary(inits, closes []time.Duration, limit time.Duration) string {
	var parts []string
	for _, s := range []struct {
		name string
		d    []time.Duration
	}{{"Init", inits}, {"Close", closes}} {
		d := slices.Clone(s.d)
		slices.Sort(d)
		over := 0
		for _, x := range d {
			if x > limit {
				over++
			}
		}
		q := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
		parts = append(parts, fmt.Sprintf("%s (%d calls): p50 %v, p99 %v, max %v, %d over %v", s.name, len(d),
			q(0.50).Round(time.Millisecond), q(0.99).Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond), over, limit))
	}
	return strings.Join(parts, "; ")
}
