package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/internal/netemu"
	"github.com/hiercomm/hiercomm/internal/procgroup"
	"github.com/hiercomm/hiercomm/topology"
)

// The test binary doubles as the program `hiercomm run` starts: with
// envRole set it plays one process of the job instead of running tests.
const envRole = "HIERCOMM_CMD_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(envRole) {
	case "":
		os.Exit(m.Run())
	case "exit3-on-rank1":
		if os.Getenv("RANK") == "1" {
			fmt.Println("rank 1 fails")
			os.Exit(3)
		}
		time.Sleep(time.Minute) // the launcher must stop this one
		os.Exit(0)
	case "env":
		// Layout 1,2: node 0 has rank 0, node 1 has ranks 1 and 2.
		rank, _ := strconv.Atoi(os.Getenv("RANK"))
		node, local := 0, 0
		if rank > 0 {
			node, local = 1, rank-1
		}
		want := fmt.Sprintf("RANK=%d WORLD_SIZE=3 LOCAL_RANK=%d GROUP_RANK=%d addr=127.0.0.%d sockets=1", rank, local, node, node+1)
		got := fmt.Sprintf("RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s GROUP_RANK=%s addr=%s sockets=%s", os.Getenv("RANK"), os.Getenv("WORLD_SIZE"),
			os.Getenv("LOCAL_RANK"), os.Getenv("GROUP_RANK"), os.Getenv("HIERCOMM_ADDR"), os.Getenv("HIERCOMM_LAUNCHER_SOCKETS"))
		if got != want {
			fmt.Printf("environment %q, want %q\n", got, want)
			os.Exit(1)
		}
		for fd := 3; fd <= 5; fd++ {
			if f := os.NewFile(uintptr(fd), "socket"); f == nil {
				fmt.Printf("fd %d is not open\n", fd)
				os.Exit(1)
			} else if _, err := f.Stat(); err != nil {
				fmt.Printf("fd %d: %v\n", fd, err)
				os.Exit(1)
			}
		}
		os.Exit(0)
	case "fabric":
		// Each rank runs in its node's namespace (not the test's), at its
		// own NIC's address, with its launcher sockets.
		node, _ := strconv.Atoi(os.Getenv("GROUP_RANK"))
		local, _ := strconv.Atoi(os.Getenv("LOCAL_RANK"))
		if want := fmt.Sprintf("10.0.%d.%d", local, node+1); os.Getenv("HIERCOMM_ADDR") != want {
			fmt.Printf("HIERCOMM_ADDR=%s, want %s\n", os.Getenv("HIERCOMM_ADDR"), want)
			os.Exit(1)
		}
		if ns, _ := os.Readlink("/proc/self/ns/net"); ns == "" || ns == os.Getenv(envParentNS) {
			fmt.Printf("network namespace %q, want another than the launcher's %s\n", ns, os.Getenv(envParentNS))
			os.Exit(1)
		}
		for fd := 3; fd <= 5; fd++ {
			var st syscall.Stat_t
			if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
				fmt.Printf("fd %d is not a socket (%v)\n", fd, err)
				os.Exit(1)
			}
		}
		os.Exit(0)
	case "bound":
		// Every thread of this rank runs on the CPUs the test expects
		// (envCPUs: rank r's list at field r), the runtime's first ones
		// included.
		os.Exit(boundRole())
	case "report":
		// rank 1 calls os.Exit(7) in its fourth step (docs/reliability.md
		// runs this role by hand)
		os.Exit(faultRole("exit", "1"))
	case "fault":
		os.Exit(faultRole(os.Getenv(envFault), os.Getenv(envFaulty)))
	case "term":
		os.Exit(termRole())
	case "train":
		os.Exit(trainRole())
	case "soak":
		os.Exit(soakRole())
	case "usr1":
		os.Exit(usr1Role())
	case "elastic":
		os.Exit(elasticRole())
	case "replace":
		os.Exit(replaceRole())
	case "sleep":
		// Says it runs, then waits for the launcher to stop it.
		if err := os.WriteFile(filepath.Join(os.Getenv(envDir), "rank"+os.Getenv("RANK")), nil, 0o644); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(1)
}

const (
	envParentNS = "HIERCOMM_CMD_TEST_PARENT_NS"
	envDir      = "HIERCOMM_CMD_TEST_DIR"
)

// SIGUSR1 to hiercomm run goes on to every rank, and each, a program that
// called hiercomm.Init with HIERCOMM_FLIGHT_RECORDER set, writes its
// communicators' flight recorders to its log; the job goes on.
func TestRunPassesSIGUSR1On(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(envRole, "usr1")
	t.Setenv(envDir, dir)
	t.Setenv("HIERCOMM_FLIGHT_RECORDER", "8")
	var out, errs procgroup.Buffer
	codes := make(chan int, 1)
	go func() {
		codes <- run([]string{"--nodes", "2", "--ranks-per-node", "1", "--", os.Args[0], "-test.run=^$"}, &out, &errs)
	}()
	// Once every rank runs, run has caught SIGUSR1 (before it starts
	// them), so the signal goes to it, not to this test.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if ents, _ := os.ReadDir(dir); len(ents) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ranks never started\n%s%s", out.String(), errs.String())
		}
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-codes:
		all := out.String() + errs.String()
		if code != 0 || strings.Count(all, "got SIGUSR1") != 2 {
			t.Fatalf("hiercomm run exited %d; want both ranks to get SIGUSR1 and exit 0\n%s", code, all)
		}
		for r := range 2 {
			if !strings.Contains(all, fmt.Sprintf("flight recorder: collective comm=world rank=%d seq=1 call=\"AllReduce(4×f32, sum)\" state=ok", r)) {
				t.Errorf("rank %d wrote no flight recorder on SIGUSR1\n%s", r, all)
			}
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the ranks never got SIGUSR1")
	}
}

func TestRunExitsWithTheFailingProcessCodeAndStopsTheOthers(t *testing.T) {
	t.Setenv(envRole, "exit3-on-rank1")
	start := time.Now()
	// The others sleep without a handler: SIGTERM after the grace ends them.
	code := run([]string{"--nodes", "2", "--ranks-per-node", "2", "--grace", "1s", "--", os.Args[0], "-test.run=^$"}, os.Stdout, os.Stderr)
	if code != 3 {
		t.Errorf("hiercomm run exited %d, want 3 (rank 1's code)", code)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("took %v: the other processes were not stopped", took)
	}
}

func TestRunSucceedsAndSetsTheEnvironment(t *testing.T) {
	t.Setenv(envRole, "env")
	if code := run([]string{"--nodes", "2", "--ranks-per-node", "1,2", "--", os.Args[0], "-test.run=^$"}, os.Stdout, os.Stderr); code != 0 {
		t.Fatalf("hiercomm run exited %d, want 0", code)
	}
	// A list of counts needs no --nodes.
	if code := run([]string{"--ranks-per-node", "1,2", "--", os.Args[0], "-test.run=^$"}, os.Stdout, os.Stderr); code != 0 {
		t.Fatalf("hiercomm run --ranks-per-node 1,2 exited %d, want 0", code)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--nodes", "0", "--", "true"},
		{"--nodes", "-1", "--ranks-per-node", "2", "--", "true"},
		{"--network", "foo", "--", "true"},
		{"--placement", "diagonal", "--", "true"},
		{"--env", "kubernetes", "--placement", "cyclic", "--", "true"},
		{"--nodes", "2", "--ranks-per-node", "1,2,3", "--", "true"},
		{"--nodes", "2", "--ranks-per-node", "0", "--", "true"},
		{"--nodes", "2"},
		{"--env", "mpi", "--", "true"},
		{"--link-per-node", "--", "true"},
		{"--link-rate", "fast", "--", "true"},
		{"--link-rate", "1gb", "--", "true"},
		{"--grace", "-1s", "--", "true"},
		{"--kill-after", "0s", "--", "true"},
		{"--bind", "socket", "--", "true"},
	} {
		var errs strings.Builder
		if code := run(args, os.Stdout, &errs); code != 2 {
			t.Errorf("hiercomm run %v exited %d, want 2 (a usage error): %s", args, code, errs.String())
		}
	}
}

// boundRole checks that every thread of this process may run only on
// the CPUs that envCPUs names for its rank.
func boundRole() int {
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	want := strings.Split(os.Getenv(envCPUs), " ")[rank]
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) == 0 {
		fmt.Println("no threads to read:", err)
		return 1
	}
	for _, task := range tasks {
		status, err := os.ReadFile(task)
		if err != nil {
			continue // the thread has exited
		}
		for _, line := range strings.Split(string(status), "\n") {
			if list, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok && strings.TrimSpace(list) != want {
				fmt.Printf("rank %d: %s runs on CPUs %s, want %s\n", rank, task, strings.TrimSpace(list), want)
				return 1
			}
		}
	}
	return 0
}

const envCPUs = "HIERCOMM_CMD_TEST_CPUS"

// TestRunBindsToCores: with --bind core, every thread of every rank runs
// on its share of the CPUs; HIERCOMM_BIND=core does the same, and
// --bind none overrides it.
func TestRunBindsToCores(t *testing.T) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status (%v): binding is Linux's", err)
	}
	var all string
	for _, line := range strings.Split(string(data), "\n") {
		if list, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			all = strings.TrimSpace(list)
		}
	}
	cpus := runtime.NumCPU()
	// Three ranks: one CPU each when there are 3 or fewer (CPU r mod
	// CPUs), and this test's shares below when the test itself may use
	// CPUs 0 to n-1 (the usual case); else only the unbound run is checked.
	if all != fmt.Sprintf("0-%d", cpus-1) && cpus > 1 {
		t.Skipf("this process runs on CPUs %s: the expected shares are worked out for 0-%d", all, cpus-1)
	}
	share := func(r int) string {
		if cpus <= 3 {
			return strconv.Itoa(r % cpus)
		}
		lo, hi := r*cpus/3, (r+1)*cpus/3-1
		if lo == hi {
			return strconv.Itoa(lo)
		}
		return fmt.Sprintf("%d-%d", lo, hi)
	}
	bound := share(0) + " " + share(1) + " " + share(2)
	if cpus == 1 {
		all = "0"
	}
	unbound := all + " " + all + " " + all
	t.Setenv(envRole, "bound")
	for _, tc := range []struct {
		env, want string
		args      []string
	}{
		{"", bound, []string{"--bind", "core"}},
		{"core", bound, nil},
		{"core", unbound, []string{"--bind", "none"}},
		{"", unbound, nil},
	} {
		t.Setenv("HIERCOMM_BIND", tc.env)
		t.Setenv(envCPUs, tc.want)
		args := append(append([]string{"--nodes", "1", "--ranks-per-node", "3"}, tc.args...), "--", os.Args[0], "-test.run=^$")
		if code := run(args, os.Stdout, os.Stderr); code != 0 {
			t.Errorf("HIERCOMM_BIND=%q hiercomm run %v: exited %d, want 0 (each rank on CPUs %q)", tc.env, tc.args, code, tc.want)
		}
	}
}

// A bad flag is refused before anything is built: --network foo with
// --link-rate used to set up the emulated network (namespaces, links)
// and only then reject foo.
func TestRunChecksFlagsBeforeItBuilds(t *testing.T) {
	var errs strings.Builder
	code := run([]string{"--nodes", "2", "--link-rate", "1gbit", "--network", "foo", "--", "true"}, os.Stdout, &errs)
	if code != 2 || !strings.Contains(errs.String(), `Network "foo": want quic (`) {
		t.Errorf("exit %d, stderr %q; want 2 and the bad network named", code, errs.String())
	}
	if strings.Contains(errs.String(), "emulated network") {
		t.Errorf("the emulated network was built before the flags were checked: %s", errs.String())
	}
}

func TestTopologyPrintsADumpAndRejectsABadOne(t *testing.T) {
	topo, err := topology.New([]topology.Member{
		{Rank: 0, Host: "a", Local: 0, Device: -1}, {Rank: 1, Host: "a", Local: 1, Device: -1},
		{Rank: 2, Host: "b", Local: 0, Device: -1}, {Rank: 3, Host: "b", Local: 1, Device: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := topo.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad.json")
	if err := os.WriteFile(good, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"version":1,"members":[{"rank":0,"host":"a","local":1,"device":-1}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := showTopology([]string{good}, io.Discard, io.Discard); code != 0 {
		t.Errorf("hiercomm topology on a good dump exited %d", code)
	}
	if code := showTopology([]string{bad}, io.Discard, io.Discard); code != 1 {
		t.Errorf("hiercomm topology on a dump with a missing local index exited %d, want 1", code)
	}
	if code := showTopology(nil, io.Discard, io.Discard); code != 2 {
		t.Errorf("hiercomm topology without a file exited %d, want 2", code)
	}
	// hiercomm plan reads the same dump, and the launch's choices from the
	// environment, as a job would.
	t.Setenv(launchenv.EnvNetwork, "tcp")
	var out, errs strings.Builder
	if code := showPlan([]string{"-rank", "3", good}, &out, &errs); code != 0 {
		t.Fatalf("hiercomm plan -rank 3 on a good dump exited %d: %s", code, errs.String())
	}
	for _, want := range []string{"rank            3 of 4: node 1 of 2, local rank 1 of 2", "layout          hierarchy: shm within nodes, tcp between", "tcp rail (2 ranks)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("hiercomm plan printed no %q:\n%s", want, out.String())
		}
	}
	errs.Reset()
	if code := showPlan([]string{"-rank", "4", good}, io.Discard, &errs); code != 2 || !strings.Contains(errs.String(), "ranks 0 to 3") {
		t.Errorf("hiercomm plan -rank 4 of 4: exit %d, %q; want 2 and the ranks there are", code, errs.String())
	}
	if code := showPlan([]string{bad}, io.Discard, io.Discard); code != 1 {
		t.Errorf("hiercomm plan on a bad dump exited %d, want 1", code)
	}
	t.Setenv(launchenv.EnvIntra, "foo")
	errs.Reset()
	if code := showPlan([]string{good}, io.Discard, &errs); code != 1 || !strings.Contains(errs.String(), launchenv.EnvIntra) {
		t.Errorf("hiercomm plan with %s=foo: exit %d, %q; want 1 and the variable named", launchenv.EnvIntra, code, errs.String())
	}
}

// fabricLeft is this process's fabric namespaces still on the host.
func fabricLeft(t *testing.T) []string {
	t.Helper()
	names, err := netemu.Namespaces()
	if err != nil {
		t.Fatal(err)
	}
	var mine []string
	for _, ns := range names {
		if strings.HasPrefix(ns, fmt.Sprintf("hcnet-%d-", os.Getpid())) {
			mine = append(mine, ns)
		}
	}
	return mine
}

func TestRunOnEmulatedLinks(t *testing.T) {
	if err := netemu.Available(); err != nil {
		t.Skip(err)
	}
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(envParentNS, self)
	t.Setenv(envRole, "fabric")
	if code := run([]string{"--nodes", "2", "--ranks-per-node", "2", "--link-rate", "1gbit", "--", os.Args[0], "-test.run=^$"}, os.Stdout, os.Stderr); code != 0 {
		t.Errorf("hiercomm run --link-rate 1gbit exited %d, want 0", code)
	}
	if left := fabricLeft(t); len(left) > 0 {
		t.Errorf("after the job, namespaces %v are left", left)
	}
	// A failing job tears the fabric down too.
	t.Setenv(envRole, "exit3-on-rank1")
	if code := run([]string{"--nodes", "2", "--ranks-per-node", "2", "--link-rate", "1gbit", "--link-per-node", "--grace", "1s", "--", os.Args[0], "-test.run=^$"}, os.Stdout, os.Stderr); code != 3 {
		t.Errorf("hiercomm run --link-rate with rank 1 failing exited %d, want 3", code)
	}
	if left := fabricLeft(t); len(left) > 0 {
		t.Errorf("after a failed job, namespaces %v are left", left)
	}
}

func TestRunOnEmulatedLinksTearsDownOnInterrupt(t *testing.T) {
	if err := netemu.Available(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	t.Setenv(envRole, "sleep")
	t.Setenv(envDir, dir)
	codes := make(chan int, 1)
	go func() {
		codes <- run([]string{"--nodes", "2", "--ranks-per-node", "1", "--link-rate", "500mbit", "--", os.Args[0], "-test.run=^$"}, os.Stdout, os.Stderr)
	}()
	// Once a rank runs, run has caught SIGINT (it does before it builds
	// the fabric), so the signal goes to it, not to this test.
	deadline := time.Now().Add(time.Minute)
	for {
		if ents, _ := os.ReadDir(dir); len(ents) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the ranks never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if left := fabricLeft(t); len(left) != 3 {
		t.Errorf("while the job runs, this process has namespaces %v, want a switch and 2 nodes", left)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-codes:
		if code == 0 {
			t.Errorf("an interrupted job exited 0")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("hiercomm run did not stop on SIGINT")
	}
	if left := fabricLeft(t); len(left) > 0 {
		t.Errorf("after SIGINT, namespaces %v are left", left)
	}
}

// TestHelpAndUsageErrors: every subcommand's --help prints its usage on
// stdout and exits 0; a wrong flag or argument is one line on stderr and
// exit 2.
func TestHelpAndUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"--help"}, 0, "hiercomm run [flags]", ""},
		{[]string{"run", "--help"}, 0, "-ranks-per-node", ""},
		{[]string{"run", "-h"}, 0, "usage: hiercomm run", ""},
		{[]string{"topology", "--help"}, 0, "usage: hiercomm topology FILE", ""},
		{[]string{"keygen", "--help"}, 0, "usage: hiercomm keygen", ""},
		{[]string{"plan", "--help"}, 0, "usage: hiercomm plan", ""},
		{[]string{"plan"}, 2, "", "want one FILE"},
		{[]string{"plan", "--bogus", "f"}, 2, "", "flag provided but not defined: -bogus"},
		{[]string{"run", "--bogus"}, 2, "", "flag provided but not defined: -bogus"},
		{[]string{"run"}, 2, "", "no program given"},
		{[]string{"topology"}, 2, "", "want one FILE"},
		{[]string{"keygen", "extra"}, 2, "", "takes no arguments"},
		{[]string{"frobnicate"}, 2, "", "unknown command"},
	} {
		var out, errb strings.Builder
		code := dispatch(tc.args, &out, &errb)
		if code != tc.code || !strings.Contains(out.String(), tc.out) || !strings.Contains(errb.String(), tc.err) {
			t.Errorf("hiercomm %v: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				tc.args, code, out.String(), errb.String(), tc.code, tc.out, tc.err)
		}
		if tc.code == 2 && strings.Count(strings.TrimSpace(errb.String()), "\n") > 0 {
			t.Errorf("hiercomm %v: a usage error of more than one line: %q", tc.args, errb.String())
		}
	}
	var out strings.Builder
	if code := dispatch([]string{"keygen"}, &out, io.Discard); code != 0 || len(strings.TrimSpace(out.String())) != 64 {
		t.Errorf("hiercomm keygen: exit %d, %q; want a 64-digit hex key", code, out.String())
	}
}
