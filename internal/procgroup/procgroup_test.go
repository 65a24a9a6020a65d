package procgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFirstFailureStopsTheRestAndKeepsItsCode(t *testing.T) {
	var out Buffer
	g, err := Start(context.Background(), Spec{
		Procs: []Proc{
			{Path: "/bin/sh", Args: []string{"-c", "sleep 0.5; echo one; printf 'two'; exit 3"}, Prefix: "[a] ", Name: "rank 0"},
			// A grandchild holds the output open: stopping the shell
			// must stop it too.
			{Path: "/bin/sh", Args: []string{"-c", "sleep 60 & echo $!; wait"}, Prefix: "[b] "},
		},
		Stdout: &out, Stderr: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = g.Wait()
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Index != 0 || ee.ExitCode() != 3 {
		t.Fatalf("Wait = %v, want process 0's exit status 3", err)
	}
	if !strings.HasPrefix(err.Error(), "rank 0 (pid ") {
		t.Errorf("Wait = %q, want it to name the process", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the sleeping process was not stopped (%v)", took)
	}
	errs := g.Errors()
	var killed *ExitError
	if !errors.As(errs[1], &killed) || killed.ExitCode() != 128+9 {
		t.Errorf("process 1: %v, want killed by SIGKILL (137)", errs[1])
	}
	var grandchild int
	for _, line := range strings.Split(out.String(), "\n") {
		if pid, ok := strings.CutPrefix(line, "[b] "); ok {
			grandchild, _ = strconv.Atoi(pid)
		}
	}
	if grandchild == 0 {
		t.Fatalf("no grandchild pid in %q", out.String())
	}
	// Its output closed as it died; the exit itself may take a moment more.
	for deadline := time.Now().Add(5 * time.Second); alive(grandchild) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(grandchild) {
		t.Errorf("the grandchild %d outlived the group", grandchild)
		syscall.Kill(grandchild, syscall.SIGKILL)
	}
	a := strings.ReplaceAll(out.String(), fmt.Sprintf("[b] %d\n", grandchild), "")
	if a != "[a] one\n[a] two\n" {
		t.Errorf("output %q, want each line prefixed", a)
	}
}

func TestKeepOthersLetsThemFinish(t *testing.T) {
	g, err := Start(context.Background(), Spec{
		Procs: []Proc{
			{Path: "/bin/sh", Args: []string{"-c", "exit 1"}},
			{Path: "/bin/sh", Args: []string{"-c", "sleep 0.2"}},
		},
		KeepOthers: true, Stdout: &Buffer{}, Stderr: &Buffer{},
	})
	if err != nil {
		t.Fatal(err)
	}
	if errs := g.Errors(); errs[0] == nil || errs[1] != nil {
		t.Errorf("Errors = %v, want only process 0 failed", errs)
	}
}

func TestStartFailureNamesTheProgram(t *testing.T) {
	_, err := Start(context.Background(), Spec{Procs: []Proc{{Path: "/nonexistent/prog", Prefix: "[x] "}}})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/prog") {
		t.Errorf("got %v, want an error naming the program", err)
	}
	if _, err := Start(context.Background(), Spec{}); err == nil {
		t.Error("an empty group started")
	}
}

// alive reports whether pid runs (a zombie, dead but not yet reaped by
// whoever inherited it, does not count).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// TestShareCPUs: each process gets GOMAXPROCS = NumCPU/n (at least 1)
// unless its environment sets it; a nil environment is this process's.
func TestShareCPUs(t *testing.T) {
	t.Setenv("PROCGROUP_TEST_INHERITED", "yes")
	out := &Buffer{}
	spec := Spec{Stdout: out, Stderr: out}
	for i, env := range [][]string{nil, {"GOMAXPROCS=7"}, {"X=1"}} {
		spec.Procs = append(spec.Procs, Proc{Path: "/bin/sh", Args: []string{"-c", `echo "${GOMAXPROCS:-unset} ${PROCGROUP_TEST_INHERITED:-none}"`}, Env: env, Prefix: fmt.Sprintf("%d ", i)})
	}
	g, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(spec.Procs))
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		i, v, _ := strings.Cut(line, " ")
		n, _ := strconv.Atoi(i)
		got[n] = v
	}
	share := strconv.Itoa(CPUShare(3))
	want := []string{share + " yes", "7 none", share + " none"}
	if !slices.Equal(got, want) {
		t.Errorf("GOMAXPROCS and inherited variable = %q, want %q", got, want)
	}
	if CPUShare(1<<20) != 1 || CPUShare(0) < 1 {
		t.Errorf("CPUShare(1<<20) = %d, CPUShare(0) = %d, want 1 and ≥ 1", CPUShare(1<<20), CPUShare(0))
	}
}

// exitCodes is each process's exit code from Errors (0 for a success).
func exitCodes(t *testing.T, g *Group) []int {
	t.Helper()
	var codes []int
	for i, err := range g.Errors() {
		var ee *ExitError
		switch {
		case err == nil:
			codes = append(codes, 0)
		case errors.As(err, &ee):
			codes = append(codes, ee.ExitCode())
		default:
			t.Fatalf("process %d: %v, not an *ExitError", i, err)
		}
	}
	return codes
}

// TestFailureGivesTheOthersGraceThenTermThenKill: after the first failure
// a process that ends by itself within Grace does so (its report is
// printed), one that handles SIGTERM gets it after Grace and exits as it
// likes, and one that ignores SIGTERM is killed KillAfter later.
func TestFailureGivesTheOthersGraceThenTermThenKill(t *testing.T) {
	var out, notes Buffer
	g, err := Start(context.Background(), Spec{
		Procs: []Proc{
			{Path: "/bin/sh", Args: []string{"-c", "sleep 0.3; exit 7"}, Prefix: "[0] ", Name: "rank 0"},
			{Path: "/bin/sh", Args: []string{"-c", "sleep 1; echo report; exit 1"}, Prefix: "[1] ", Name: "rank 1"},
			{Path: "/bin/sh", Args: []string{"-c", "trap 'echo term; exit 0' TERM; sleep 60 & wait"}, Prefix: "[2] ", Name: "rank 2"},
			{Path: "/bin/sh", Args: []string{"-c", "trap '' TERM; sleep 60 & wait"}, Prefix: "[3] ", Name: "rank 3"},
		},
		Stdout: &out, Stderr: &out,
		Grace: 4 * time.Second, KillAfter: time.Second,
		Notify: func(line string) { fmt.Fprintln(&notes, line) },
	})
	if err != nil {
		t.Fatal(err)
	}
	var ee *ExitError
	if err := g.Wait(); !errors.As(err, &ee) || ee.Index != 0 || ee.ExitCode() != 7 {
		t.Errorf("Wait = %v, want rank 0's exit status 7", err)
	}
	if got, want := exitCodes(t, g), []int{7, 1, 0, 128 + 9}; !slices.Equal(got, want) {
		t.Errorf("exit codes %v, want %v (a report in the grace, a clean exit on SIGTERM, SIGKILL for the one that ignores it)\noutput:\n%s\nnotes:\n%s", got, want, out.String(), notes.String())
	}
	for _, line := range []string{"[1] report\n", "[2] term\n"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks %q:\n%s", line, out.String())
		}
	}
	n := strings.Split(strings.TrimSpace(notes.String()), "\n")
	if len(n) != 3 || !strings.HasPrefix(n[0], "rank 0 (pid ") || !strings.Contains(n[0], "exit status 7; the others (rank 1, rank 2, rank 3) have 4s") ||
		!strings.Contains(n[1], "SIGTERM to rank 2, rank 3") || !strings.Contains(n[2], "SIGKILL to rank 3") {
		t.Errorf("notes:\n%s\nwant the failure, SIGTERM to ranks 2 and 3 after the grace, SIGKILL to rank 3", notes.String())
	}
}

// TestStopLetsEveryHandlerFinish: after Stop, a process that dies by the
// signal (no handler) is no failure that hurries the others: the one that
// handles it finishes its cleanup.
func TestStopLetsEveryHandlerFinish(t *testing.T) {
	var out Buffer
	g, err := Start(context.Background(), Spec{
		Procs: []Proc{
			// Short sleeps, not one long one: under load a long child
			// that the shell forks as the SIGTERM comes was seen to miss
			// it and hold the output open after the shell's exit, until
			// Wait gave up on it WaitDelay later (exec.ErrWaitDelay, exit
			// code 1, in 2 of 4 CI runs).
			{Path: "/bin/sh", Args: []string{"-c", "echo up; while :; do sleep 0.1; done"}, Prefix: "[0] ", Name: "rank 0"},
			{Path: "/bin/sh", Args: []string{"-c", "trap 'sleep 1; echo cleaned; exit 0' TERM; echo up; while :; do sleep 0.1; done"}, Prefix: "[1] ", Name: "rank 1"},
		},
		Stdout: &out, Stderr: &out,
		Grace: time.Minute, KillAfter: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); strings.Count(out.String(), "up\n") < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the processes never started:\n%s", out.String())
		}
	}
	g.Stop(syscall.SIGTERM)
	if got, want := exitCodes(t, g), []int{128 + 15, 0}; !slices.Equal(got, want) {
		t.Errorf("exit codes %v (%v), want %v: the handler's cleanup was cut short\n%s", got, g.Errors(), want, out.String())
	}
	if !strings.Contains(out.String(), "[1] cleaned\n") {
		t.Errorf("rank 1 did not finish its cleanup:\n%s", out.String())
	}
}

// TestBind: with Spec.Bind, each process runs on its share of this
// process's CPUs (as the kernel reports in the process's own
// /proc/self/status), with as many processes as CPUs, fewer and more;
// without it, on all of them.
func TestBind(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("binding to CPUs is Linux's only (sched_setaffinity)")
	}
	allowed := threadCPUs()
	if len(allowed) == 0 {
		t.Fatal("sched_getaffinity named no CPU")
	}
	for _, n := range []int{1, len(allowed), 2*len(allowed) + 1} {
		for _, bind := range []bool{true, false} {
			t.Run(fmt.Sprintf("procs=%d/bind=%v", n, bind), func(t *testing.T) {
				out := &Buffer{}
				spec := Spec{Stdout: out, Stderr: out, Bind: bind}
				for i := range n {
					spec.Procs = append(spec.Procs, Proc{Path: "/bin/sh", Args: []string{"-c", "grep Cpus_allowed_list /proc/self/status"}, Prefix: fmt.Sprintf("%d ", i)})
				}
				g, err := Start(context.Background(), spec)
				if err != nil {
					t.Fatal(err)
				}
				if err := g.Wait(); err != nil {
					t.Fatal(err)
				}
				got := make([][]int, n)
				for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
					i, v, _ := strings.Cut(line, " ")
					k, _ := strconv.Atoi(i)
					_, list, _ := strings.Cut(v, ":")
					got[k] = parseCPUList(t, strings.TrimSpace(list))
				}
				for i := range n {
					want := allowed
					if bind {
						want = shareOf(allowed, i, n)
					}
					if !slices.Equal(got[i], want) {
						t.Errorf("process %d of %d runs on CPUs %v, want %v", i, n, got[i], want)
					}
				}
			})
		}
	}
}

// TestShareOf: the shares cover every CPU once when the processes fit,
// and each CPU's processes are the same ones when they do not.
func TestShareOf(t *testing.T) {
	cpus := []int{0, 1, 2, 3, 4, 5}
	for _, tc := range []struct {
		n    int
		want [][]int
	}{
		{1, [][]int{{0, 1, 2, 3, 4, 5}}},
		{4, [][]int{{0}, {1, 2}, {3}, {4, 5}}},
		{6, [][]int{{0}, {1}, {2}, {3}, {4}, {5}}},
		{8, [][]int{{0}, {1}, {2}, {3}, {4}, {5}, {0}, {1}}},
	} {
		for i, want := range tc.want {
			if got := shareOf(cpus, i, tc.n); !slices.Equal(got, want) {
				t.Errorf("shareOf(%v, %d, %d) = %v, want %v", cpus, i, tc.n, got, want)
			}
		}
	}
	if got := shareOf(nil, 0, 2); got != nil {
		t.Errorf("shareOf(nil, 0, 2) = %v, want nil (no binding)", got)
	}
}

// parseCPUList reads the kernel's CPU list format ("0-3,8,10-11").
func parseCPUList(t *testing.T, s string) []int {
	t.Helper()
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, ranged := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			t.Fatalf("CPU list %q: %v", s, err)
		}
		b := a
		if ranged {
			if b, err = strconv.Atoi(hi); err != nil {
				t.Fatalf("CPU list %q: %v", s, err)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus
}
