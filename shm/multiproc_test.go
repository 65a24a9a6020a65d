//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/internal/nexarjob"
	"github.com/hiercomm/hiercomm/internal/procgroup"
	"github.com/hiercomm/hiercomm/shm"
)

func TestMain(m *testing.M) { os.Exit(multiprocMain(m)) }

// TestConformanceMultiProcess runs the conformance suites with every rank in
// its own process, as a single-node job runs: RunRank, then P2P,
// NonBlocking, Split, BadInput, Fused and Mismatch. Without the race
// detector it covers every world size of worldSizes with the suite's full
// counts (the large one, 1000003, is several slots long); under it, where
// the suite's own work is ~10× slower and every rank shares two cores, a
// smaller matrix. A world with a small slot makes modest counts go through
// many chunks.
func TestConformanceMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process conformance is not short")
	}
	type world struct {
		ranks  int
		counts string // empty: the suite's defaults, 0, 1, 7, 1000003
		slot   int    // Config.SlotBytes; 0: the default
		suites string // empty: all
	}
	worlds := []world{
		{ranks: 1}, {ranks: 2}, {ranks: 3}, {ranks: 4}, {ranks: 5}, {ranks: 8},
		{ranks: 3, counts: "0,1,7,4099,65537", slot: 64 << 10, suites: "RunRank,P2P,NonBlocking"},
	}
	if raceEnabled {
		// Every suite on some world, every world size, few counts: the
		// in-process tests cover the same code under the race detector
		// with larger counts, and the package's race run must stay short.
		worlds = []world{
			{ranks: 1, counts: "0,7", suites: "RunRank,P2P"},
			{ranks: 2, counts: "0,1,7,4099"},
			{ranks: 3, counts: "0,7,4099", slot: 8 << 10, suites: "RunRank,P2P,NonBlocking"},
			{ranks: 4, counts: "0,7", suites: "RunRank,Fused"},
			{ranks: 5, counts: "0,7", suites: "RunRank,BadInput,Mismatch"},
			{ranks: 8, counts: "0,7", suites: "RunRank,Split"},
		}
	}
	for _, w := range worlds {
		name := fmt.Sprintf("ranks=%d", w.ranks)
		if w.slot != 0 {
			name += fmt.Sprintf(",slot=%d", w.slot)
		}
		t.Run(name, func(t *testing.T) {
			ns := testNamespace(t)
			ranks := make([]int, w.ranks)
			for r := range ranks {
				ranks[r] = r
			}
			env := []string{envCounts + "=" + w.counts, envSuites + "=" + w.suites}
			if w.slot != 0 {
				env = append(env, envSlot+"="+strconv.Itoa(w.slot))
			}
			start := time.Now()
			j := startJob(t, ns, w.ranks, ranks, "conformance", env...)
			j.wait(8 * time.Minute)
			if failed := j.failed(); len(failed) > 0 {
				t.Fatalf("%s\n%s", strings.Join(failed, "\n"), j.output())
			}
			out := j.output()
			for _, s := range rankSuites {
				if w.suites != "" && !slices.Contains(strings.Split(w.suites, ","), s.name) {
					continue
				}
				if got := strings.Count(out, ": "+s.name+" passed ("); got != w.ranks {
					t.Errorf("%s passed on %d of %d ranks", s.name, got, w.ranks)
				}
			}
			if got := strings.Count(out, "conformance passed"); got != w.ranks {
				t.Errorf("%d of %d ranks passed", got, w.ranks)
			}
			if t.Failed() {
				t.Fatalf("\n%s", out)
			}
			t.Logf("%d ranks passed in %v", w.ranks, time.Since(start).Round(time.Millisecond))
			requireNoSegments(t, ns, "after the job")
		})
	}
}

// TestKilledRankIsReportedByEverySurvivor stops one rank of four while they
// run 16 MiB AllReduces back to back: killed with SIGKILL (its pid is gone),
// or stopped with SIGSTOP (its pid lives on, its heartbeat stops). Every
// survivor must return an error that wraps comm.ErrPeerFailed and names that
// rank, within FailureTimeout and a margin; its next call must fail fast
// with comm.ErrAborted. The segment was unlinked once every rank had
// attached, so nothing of the job is left in /dev/shm, before or after.
func TestKilledRankIsReportedByEverySurvivor(t *testing.T) {
	const failureTimeout = 2 * time.Second
	margin := 3 * time.Second
	if raceEnabled {
		margin = 6 * time.Second
	}
	cases := []struct {
		name string
		sig  syscall.Signal
		dead int
	}{
		{"kill=1", syscall.SIGKILL, 1},
		{"kill=0", syscall.SIGKILL, 0},
		{"stop=2", syscall.SIGSTOP, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := testNamespace(t)
			j := startJob(t, ns, 4, []int{0, 1, 2, 3}, "crash",
				envFailure+"="+failureTimeout.String(), envDead+"="+strconv.Itoa(tc.dead))
			if !waitFor(time.Minute, func() bool { return strings.Count(j.output(), "READY") == 4 }) {
				t.Fatalf("the ranks never got going:\n%s", j.output())
			}
			requireNoSegments(t, ns, "once every rank had attached")
			at := j.signal(tc.dead, tc.sig)
			var survivors []*proc
			for _, p := range j.procs {
				if p.rank != tc.dead {
					survivors = append(survivors, p)
				}
			}
			(&job{t: t, ns: ns, procs: survivors}).wait(failureTimeout + margin + 10*time.Second)
			for _, p := range survivors {
				if p.err != nil {
					t.Errorf("survivor rank %d: %v", p.rank, p.err)
				}
				if took := p.exited.Sub(at); took > failureTimeout+margin {
					t.Errorf("survivor rank %d exited %v after the signal; want within FailureTimeout (%v) + %v", p.rank, took.Round(time.Millisecond), failureTimeout, margin)
				}
			}
			if got := strings.Count(j.output(), "SURVIVOR-OK"); got != 3 {
				t.Errorf("%d survivors reported the failure correctly, want 3", got)
			}
			j.killAll()
			t.Logf("\n%s", j.output())
			requireNoSegments(t, ns, "after the failure")
		})
	}
}

// A rank stopped (SIGSTOP) for longer than FailureTimeout and then
// continued: its node-mates give it up and name it; it must learn that it
// was the one that failed (stalled, expelled), as it does over nexar, not
// blame the node-mate whose abort record it reads.
func TestStalledRankLearnsItWasExpelled(t *testing.T) {
	const failureTimeout = time.Second
	ns := testNamespace(t)
	j := startJob(t, ns, 3, []int{0, 1, 2}, "stall", envFailure+"="+failureTimeout.String())
	if !waitFor(time.Minute, func() bool { return strings.Count(j.output(), "READY") == 3 }) {
		t.Fatalf("the ranks never got going:\n%s", j.output())
	}
	j.signal(2, syscall.SIGSTOP)
	time.Sleep(3 * failureTimeout)
	j.signal(2, syscall.SIGCONT)
	j.wait(time.Minute)
	requireStallReports(t, j.output(), 3, 2)
	requireNoSegments(t, ns, "after the stall")
}

// The same in a 2x2 hierarchy, shared memory within the nodes and QUIC
// between them: global rank 3 is stopped; its node-mate gives it up
// through shared memory, the other node through the world's transport.
// Whichever part's news reaches it first, the stalled rank says that it
// was the one (the hierarchy passes the part's error on), and every other
// rank names it.
func TestStalledRankInAHierarchyLearnsItWasExpelled(t *testing.T) {
	if testing.Short() {
		t.Skip("four processes over QUIC")
	}
	ns := testNamespace(t)
	var out procgroup.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	job, err := nexarjob.Start(ctx, nexarjob.Spec{Ranks: 4, Args: []string{"-test.run=^$"}, KeepOthers: true,
		Env: []string{envRole + "=hierstall", envNS + "=" + ns}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	if !waitFor(time.Minute, func() bool { return strings.Count(out.String(), "READY") == 4 }) {
		t.Fatalf("the ranks never got going:\n%s", out.String())
	}
	if err := job.Signal(3, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if err := job.Signal(3, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for r, err := range job.Errors() {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	requireStallReports(t, out.String(), 4, 3)
	for node := range 2 {
		requireNoSegments(t, fmt.Sprintf("%s-node%d", ns, node), "after the stall")
	}
}

// requireStallReports checks the lines of n ranks (printStallError) in
// text: every rank blames the stalled one, which says it was stalled.
func requireStallReports(t *testing.T, text string, n, stalled int) {
	t.Helper()
	for r := range n {
		want := fmt.Sprintf("STALL-ERROR rank=%d culprit=%d known=true stalled=%v peerfailed=true", r, stalled, r == stalled)
		if !strings.Contains(text, want) {
			t.Errorf("rank %d did not report %q", r, want)
		}
	}
	t.Logf("\n%s", text)
}

// TestStaleSegmentIsCleared leaves a segment behind the way a killed job
// does: rank 0 of a world of 2 creates it and waits for rank 1, which never
// comes, and is killed with SIGKILL. While the creator lives, a second
// rank 0 in the same namespace is refused with an error that names its pid;
// once it is dead, a new job in that namespace starts, works, and leaves no
// file.
func TestStaleSegmentIsCleared(t *testing.T) {
	ns := testNamespace(t)
	holder := startJob(t, ns, 2, []int{0}, "hold")
	var segs []string
	if !waitFor(30*time.Second, func() bool {
		segs, _ = shm.Segments(ns)
		return len(segs) > 0
	}) {
		t.Fatalf("rank 0 created no segment in /dev/shm:\n%s", holder.output())
	}
	t.Logf("rank 0 (pid %d) created %v", holder.rank(0).cmd.Process.Pid, segs)

	t.Run("live", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		c, err := shm.New(ctx, shm.Config{Namespace: ns, Rank: 0, Size: 2, ConnectTimeout: 10 * time.Second})
		if err == nil {
			c.Close()
			t.Fatal("a second rank 0 joined a namespace whose creator is alive")
		}
		pid := strconv.Itoa(holder.rank(0).cmd.Process.Pid)
		if !strings.Contains(err.Error(), pid) {
			t.Errorf("the error does not name the live creator's pid %s: %v", pid, err)
		}
		t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
		if got, _ := shm.Segments(ns); len(got) == 0 {
			t.Errorf("the refused rank removed the live job's segment")
		}
	})

	holder.signal(0, syscall.SIGKILL)
	if segs, _ := shm.Segments(ns); len(segs) == 0 {
		t.Fatalf("the killed creator's segment is gone before the next job started; the test cannot test anything:\n%s", holder.output())
	}

	t.Run("next-job", func(t *testing.T) {
		// Rank 1 first, so that it finds the stale file and must wait for
		// the new rank 0 to replace it rather than attach to it.
		j := startJob(t, ns, 2, []int{1}, "loop", envSeed+"=7", envIters+"=3")
		time.Sleep(300 * time.Millisecond)
		j0 := startJob(t, ns, 2, []int{0}, "loop", envSeed+"=7", envIters+"=3")
		j.procs = append(j0.procs, j.procs...)
		j.wait(2 * time.Minute)
		if failed := j.failed(); len(failed) > 0 {
			t.Fatalf("a job in the namespace of a killed one failed:\n%s\n%s", strings.Join(failed, "\n"), j.output())
		}
		if got := strings.Count(j.output(), "LOOP-OK"); got != 2 {
			t.Fatalf("%d of 2 ranks finished\n%s", got, j.output())
		}
		t.Logf("\n%s", j.output())
		requireNoSegments(t, ns, "after the next job")
	})
}

// TestNewFailsAloneAndLeavesNothing starts one rank of a world of two and
// never the other: New must give up after ConnectTimeout with an error that
// says what is missing, and rank 0 must remove the file it created.
func TestNewFailsAloneAndLeavesNothing(t *testing.T) {
	const connect = 500 * time.Millisecond
	cases := []struct {
		rank int
		want string // in the error
	}{
		{0, "ranks [1]"}, // the rank that did not attach
		{1, "rank 0"},    // the creator it waited for
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("rank=%d", tc.rank), func(t *testing.T) {
			ns := testNamespace(t)
			start := time.Now()
			c, err := shm.New(context.Background(), shm.Config{Namespace: ns, Rank: tc.rank, Size: 2, ConnectTimeout: connect})
			took := time.Since(start)
			if err == nil {
				c.Close()
				t.Fatal("New returned a communicator whose other rank never started")
			}
			t.Logf("after %v: %v", took.Round(time.Millisecond), err)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("the error does not mention %q", tc.want)
			}
			if took < connect || took > connect+2*time.Second {
				t.Errorf("New gave up after %v; want ConnectTimeout (%v)", took, connect)
			}
			requireNoSegments(t, ns, "after New gave up")
		})
	}
}

// TestConcurrentJobsDoNotInterfere runs two jobs at once on this host, in
// different namespaces, with different world sizes and data, each checking
// every AllReduce and AllGather result against its own data; the small
// slot makes every call go through many chunks, so the two jobs'
// synchronization interleaves all the time.
func TestConcurrentJobsDoNotInterfere(t *testing.T) {
	iters := 40
	if raceEnabled {
		iters = 8
	}
	nsA, nsB := testNamespace(t), testNamespace(t)
	slot := envSlot + "=" + strconv.Itoa(64<<10)
	it := envIters + "=" + strconv.Itoa(iters)
	a := startJob(t, nsA, 3, []int{0, 1, 2}, "loop", envSeed+"=1", slot, it)
	b := startJob(t, nsB, 2, []int{0, 1}, "loop", envSeed+"=2", slot, it)
	a.wait(3 * time.Minute)
	b.wait(3 * time.Minute)
	for _, j := range []*job{a, b} {
		if failed := j.failed(); len(failed) > 0 {
			t.Errorf("job %s:\n%s\n%s", j.ns, strings.Join(failed, "\n"), j.output())
		} else if got := strings.Count(j.output(), "LOOP-OK"); got != j.size {
			t.Errorf("job %s: %d of %d ranks finished\n%s", j.ns, got, j.size, j.output())
		}
		requireNoSegments(t, j.ns, "after the job")
	}
}

// TestNewRejectsBadConfig checks that New refuses a bad Config at once,
// with an error that names the field, and creates nothing.
func TestNewRejectsBadConfig(t *testing.T) {
	ns := testNamespace(t)
	cases := []struct {
		name  string
		cfg   shm.Config
		field string
	}{
		{"namespace-empty", shm.Config{Rank: 0, Size: 1}, "Namespace"},
		{"namespace-slash", shm.Config{Namespace: ns + "/x", Rank: 0, Size: 1}, "Namespace"},
		{"namespace-space", shm.Config{Namespace: ns + " x", Rank: 0, Size: 1}, "Namespace"},
		{"namespace-dotdot", shm.Config{Namespace: "../" + ns, Rank: 0, Size: 1}, "Namespace"},
		{"namespace-long", shm.Config{Namespace: ns + strings.Repeat("x", 101), Rank: 0, Size: 1}, "Namespace"},
		{"size-zero", shm.Config{Namespace: ns, Rank: 0, Size: 0}, "Size"},
		{"size-negative", shm.Config{Namespace: ns, Rank: 0, Size: -2}, "Size"},
		{"rank-negative", shm.Config{Namespace: ns, Rank: -1, Size: 2}, "Rank"},
		{"rank-equals-size", shm.Config{Namespace: ns, Rank: 2, Size: 2}, "Rank"},
		{"slot-negative", shm.Config{Namespace: ns, Rank: 0, Size: 1, SlotBytes: -1}, "SlotBytes"},
		{"slot-tiny", shm.Config{Namespace: ns, Rank: 0, Size: 1, SlotBytes: 100}, "SlotBytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			c, err := shm.New(ctx, tc.cfg)
			if err == nil {
				c.Close()
				t.Fatalf("New(%+v) succeeded; want an error naming %s", tc.cfg, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("New(%+v): %v; want the error to name %s", tc.cfg, err, tc.field)
			}
			t.Log(err)
			if took := time.Since(start); took > time.Second {
				t.Errorf("New took %v to refuse a bad Config", took)
			}
		})
	}
	requireNoSegments(t, ns, "after the refused configs")
}
