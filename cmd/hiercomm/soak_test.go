package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/internal/procgroup"
)

// The soak: a 2 × 2 job of real processes (hiercomm run, memberlist,
// shared memory within a node, QUIC between) runs random collectives
// (AllReduce, AllGather, ReduceScatter, Broadcast, AllToAll, Barrier, and
// Split + a collective on the child + the child's Close) of random sizes
// for HIERCOMM_SOAK (a duration), checking every result. Every rank
// measures its resident memory (VmRSS, after debug.FreeOSMemory) and its
// goroutines once the warm-up (a fifth of the run, 10 s to a half) is
// over and again at the end; the test fails on any error or when either
// grows beyond the bounds below. `make soak` runs it (SOAK=3m).

const envSoak = "HIERCOMM_SOAK"

// Soak bounds: from the end of the warm-up to the end of the run, a rank's
// RSS may grow by at most a quarter plus 16 MiB (the Go heap's own
// breathing: GC pacing, pools, scavenger timing), its goroutines by at
// most 4 (timers and handlers that come and go). A leak of one buffer,
// goroutine or communicator per collective or per Split exceeds both
// within a minute.
const (
	soakRSSFactor   = 1.25
	soakRSSSlack    = 16 << 20
	soakGoroutineUp = 4
)

// soakSample is what a rank measures of itself.
type soakSample struct {
	rss        int64 // bytes
	goroutines int
}

func measure() soakSample {
	debug.FreeOSMemory()
	s := soakSample{goroutines: runtime.NumGoroutine()}
	b, _ := os.ReadFile("/proc/self/status")
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			s.rss = kb << 10
		}
	}
	return s
}

// soakRole is one rank of the soak.
func soakRole() int {
	d, err := time.ParseDuration(os.Getenv(envSoak))
	if err != nil {
		fmt.Println("soak:", err)
		return 1
	}
	ctx := context.Background()
	w, err := hiercomm.Init(ctx, hiercomm.Options{})
	if err != nil {
		fmt.Println("soak: Init:", err)
		return 1
	}
	defer w.Close()
	rank := w.Rank()
	warmup := min(max(10*time.Second, d/5), d/2)
	start := time.Now()
	var warm soakSample
	measured := false
	ops := map[string]int{}
	stop := make([]int64, 1)
	iter := 0
	for ; ; iter++ {
		// Rank 0 decides for everyone whether to go on.
		stop[0] = 0
		if rank == 0 && time.Since(start) >= d {
			stop[0] = 1
		}
		if err := w.Broadcast(ctx, comm.Host(stop), 0); err != nil {
			fmt.Printf("soak: rank %d, step %d: Broadcast of the go-on flag: %v\n", rank, iter, err)
			return 1
		}
		if stop[0] == 1 {
			break
		}
		if !measured && time.Since(start) >= warmup {
			warm, measured = measure(), true
			fmt.Printf("soak rank %d after warm-up (%v, %d steps): rss=%d goroutines=%d\n", rank, warmup, iter, warm.rss, warm.goroutines)
		}
		name, err := soakStep(ctx, w, iter)
		ops[name]++
		if err != nil {
			fmt.Printf("soak: rank %d, step %d (%s): %v\n", rank, iter, name, err)
			return 1
		}
	}
	end := measure()
	if !measured {
		fmt.Println("soak: the run ended before the warm-up did")
		return 1
	}
	var list []string
	for _, k := range []string{"allreduce", "allgather", "reducescatter", "broadcast", "alltoall", "barrier", "split"} {
		list = append(list, fmt.Sprintf("%s=%d", k, ops[k]))
	}
	fmt.Printf("soak rank %d end (%v, %d steps, %s, errors=0): rss=%d goroutines=%d\n",
		rank, time.Since(start).Round(time.Second), iter, strings.Join(list, " "), end.rss, end.goroutines)
	return 0
}

// soakStep runs step iter: a collective, its size and its root drawn from
// a generator seeded with iter, so every rank draws the same. Element i
// of rank r's data is v(r, i) = r·7919 + i + iter (int64: sums are exact).
func soakStep(ctx context.Context, c comm.Communicator, iter int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(uint64(iter), 16))
	// Sizes from 0 to 256 Ki elements, spread over the magnitudes.
	n := []int{rng.IntN(17), rng.IntN(1 << 10), rng.IntN(64 << 10), rng.IntN(256 << 10)}[rng.IntN(4)]
	P, r := c.Size(), c.Rank()
	v := func(r, i int) int64 { return int64(r*7919 + i + iter) }
	fill := func(b []int64, r, off int) {
		for i := range b {
			b[i] = v(r, off+i)
		}
	}
	check := func(what string, got []int64, want func(i int) int64) error {
		for i, g := range got {
			if w := want(i); g != w {
				return fmt.Errorf("%s of %d elements: element %d is %d, want %d", what, n, i, g, w)
			}
		}
		return nil
	}
	// sum(i) is Σ_r v(r, i) over the P ranks.
	sum := func(P, i int) int64 { return int64(7919*P*(P-1)/2 + P*(i+iter)) }
	switch rng.IntN(7) {
	case 0:
		x := make([]int64, n)
		fill(x, r, 0)
		if err := c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); err != nil {
			return "allreduce", err
		}
		return "allreduce", check("AllReduce", x, func(i int) int64 { return sum(P, i) })
	case 1:
		x, all := make([]int64, n), make([]int64, P*n)
		fill(x, r, 0)
		if err := c.AllGather(ctx, comm.Host(x), comm.Host(all)); err != nil {
			return "allgather", err
		}
		return "allgather", check("AllGather", all, func(i int) int64 { return v(i/max(n, 1), i%max(n, 1)) })
	case 2:
		x, mine := make([]int64, P*n), make([]int64, n)
		fill(x, r, 0)
		if err := c.ReduceScatter(ctx, comm.Host(x), comm.Host(mine), comm.Sum); err != nil {
			return "reducescatter", err
		}
		return "reducescatter", check("ReduceScatter", mine, func(i int) int64 { return sum(P, r*n+i) })
	case 3:
		root := rng.IntN(P)
		x := make([]int64, n)
		if r == root {
			fill(x, r, 0)
		}
		if err := c.Broadcast(ctx, comm.Host(x), root); err != nil {
			return "broadcast", err
		}
		return "broadcast", check(fmt.Sprintf("Broadcast from %d", root), x, func(i int) int64 { return v(root, i) })
	case 4:
		// Block q of rank r's send is v(r, q·n + i); block q of its recv
		// is then rank q's block r.
		x, y := make([]int64, P*n), make([]int64, P*n)
		fill(x, r, 0)
		if err := c.AllToAll(ctx, comm.Host(x), comm.Host(y)); err != nil {
			return "alltoall", err
		}
		return "alltoall", check("AllToAll", y, func(i int) int64 { return v(i/max(n, 1), r*n+i%max(n, 1)) })
	case 5:
		return "barrier", c.Barrier(ctx)
	}
	// Split by colors drawn for every rank, AllReduce on the child, Close.
	colors := make([]int, P)
	for q := range colors {
		colors[q] = rng.IntN(2)
	}
	child, err := c.Split(ctx, colors[r], r)
	if err != nil {
		return "split", err
	}
	defer child.Close()
	var members []int
	for q, col := range colors {
		if col == colors[r] {
			members = append(members, q)
		}
	}
	if child.Size() != len(members) || members[child.Rank()] != r {
		return "split", fmt.Errorf("Split(%d) of colors %v: rank %d of %d, want rank %d of %v", colors[r], colors, child.Rank(), child.Size(), r, members)
	}
	x := make([]int64, n)
	fill(x, r, 0)
	if err := child.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); err != nil {
		return "split", fmt.Errorf("AllReduce on the child of colors %v: %w", colors, err)
	}
	if err := check(fmt.Sprintf("AllReduce on the child %v", members), x, func(i int) int64 {
		var s int64
		for _, q := range members {
			s += v(q, i)
		}
		return s
	}); err != nil {
		return "split", err
	}
	return "split", child.Close()
}

// TestSoak runs the soak for HIERCOMM_SOAK (skipped without it) and checks
// the bounds on every rank's lines.
func TestSoak(t *testing.T) {
	d := os.Getenv(envSoak)
	if d == "" {
		t.Skipf("set %s to a duration (make soak: 3m) to run the soak", envSoak)
	}
	if _, err := time.ParseDuration(d); err != nil {
		t.Fatalf("%s=%q: %v", envSoak, d, err)
	}
	t.Setenv(envRole, "soak")
	var out, errs procgroup.Buffer
	code := run([]string{"--nodes", "2", "--ranks-per-node", "2", "--", os.Args[0], "-test.run=^$"}, &out, &errs)
	all := out.String() + errs.String()
	if code != 0 {
		t.Fatalf("the soak exited %d:\n%s", code, all)
	}
	warm := regexp.MustCompile(`(?m)^\[rank (\d)\] soak rank \d after warm-up .*: rss=(\d+) goroutines=(\d+)$`)
	end := regexp.MustCompile(`(?m)^\[rank (\d)\] (soak rank \d end .*errors=0\)): rss=(\d+) goroutines=(\d+)$`)
	start := map[string]soakSample{}
	for _, m := range warm.FindAllStringSubmatch(all, -1) {
		rss, _ := strconv.ParseInt(m[2], 10, 64)
		g, _ := strconv.Atoi(m[3])
		start[m[1]] = soakSample{rss, g}
	}
	ends := end.FindAllStringSubmatch(all, -1)
	if len(start) != 4 || len(ends) != 4 {
		t.Fatalf("%d ranks measured after the warm-up and %d at the end, want 4 and 4:\n%s", len(start), len(ends), all)
	}
	for _, m := range ends {
		rss, _ := strconv.ParseInt(m[3], 10, 64)
		g, _ := strconv.Atoi(m[4])
		s := start[m[1]]
		t.Logf("rank %s: rss %.1f → %.1f MiB, goroutines %d → %d; %s", m[1], float64(s.rss)/(1<<20), float64(rss)/(1<<20), s.goroutines, g, m[2])
		if limit := int64(float64(s.rss)*soakRSSFactor) + soakRSSSlack; rss > limit {
			t.Errorf("rank %s: RSS grew from %d to %d bytes, beyond the bound %d (×%.2f + %d MiB)", m[1], s.rss, rss, limit, soakRSSFactor, soakRSSSlack>>20)
		}
		if g > s.goroutines+soakGoroutineUp {
			t.Errorf("rank %s: goroutines grew from %d to %d, beyond the bound of %d more", m[1], s.goroutines, g, soakGoroutineUp)
		}
	}
}
