package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// envTestMain makes the test binary run the command itself (TestMain), so
// tests can start it as processes: alone, as a local job's ranks, or as
// ranks of a job launched by hand.
const envTestMain = "HIERCOMM_BENCH_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envTestMain) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
	}
	os.Exit(m.Run())
}

// command is this test binary running the command with args and env.
func command(ctx context.Context, args []string, env ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), envTestMain+"=1"), env...)
	return cmd
}

// quickArgs measure little, fast, and checked.
var quickArgs = []string{"-ops", "allreduce,allgather", "-b", "8", "-e", "1K", "-f", "8", "-n", "2", "-w", "1", "-repeats", "1", "-switch", "off"}

func TestBadFlagsOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"-x"}, {"-n", "many"}, {"-a", "7"}, {"-m", "4"}, {"-d", "float32"}, {"-ops", "allreduce,gossip"},
		{"-impl", "mpi"}, {"-compare", "hier"}, {"-split", "rack"}, {"-b", "1M", "-e", "1K"}, {"-link-rate", "fast"},
		{"-impl", "hier", "-compare", "hier,flat"}, {"stray"},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut, func(string) string { return "" }); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "hiercomm-bench: ") || out.Len() != 0 {
			t.Errorf("%v: stderr %q, stdout %q; want one line on stderr", args, errOut.String(), out.String())
		}
	}
}

func TestNCCLFlags(t *testing.T) {
	o, err := parseArgs([]string{"-b", "1K", "-e", "1M", "-f", "4", "-n", "7", "-w", "3", "-c", "0", "-d", "bfloat16", "-o", "max", "-r", "1", "-a", "3", "-m", "1", "-ops", "all_reduce_perf,reduce_scatter"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.cfg
	if c.MinBytes != 1<<10 || c.MaxBytes != 1<<20 || c.Factor != 4 || c.Iters != 7 || c.Warmup != 3 || c.Check || c.DType != "bfloat16" ||
		c.RedOp != "max" || c.Root != 1 || c.Average != "max" || strings.Join(c.Ops, ",") != "allreduce,reducescatter" {
		t.Errorf("nccl-tests flags gave %+v", c)
	}
	spec, err := c.Spec()
	if err != nil || spec.DType.String() != "bf16" {
		t.Errorf("Spec: %+v, %v", spec, err)
	}
	// The old names still work.
	o, err = parseArgs([]string{"-iters", "5", "-check=false", "-dtype", "f64", "-redop", "min", "-root", "2"}, io.Discard)
	if err != nil || o.cfg.Iters != 5 || o.cfg.Check || o.cfg.DType != "f64" || o.cfg.RedOp != "min" || o.cfg.Root != 2 {
		t.Errorf("old names: %+v, %v", o.cfg, err)
	}
	o, err = parseArgs([]string{"-i", "1M", "-b", "1M", "-e", "4M"}, io.Discard)
	if err != nil || o.cfg.StepBytes != 1<<20 {
		t.Errorf("-i 1M: %+v, %v", o.cfg, err)
	}
}

func TestLaunched(t *testing.T) {
	for env, want := range map[string]bool{
		"":                               false,
		"RANK=1":                         true,
		"WORLD_SIZE=4":                   true,
		"SLURM_PROCID=0":                 false, // a batch script, not a step
		"SLURM_PROCID=0,SLURM_STEP_ID=3": true,
		"HIERCOMM_K8S_SERVICE=bench":     true,
		"HIERCOMM_LAUNCHER_SOCKETS=1":    true,
		"LOCAL_RANK=0":                   false,
	} {
		vars := map[string]string{}
		for kv := range strings.SplitSeq(env, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				vars[k] = v
			}
		}
		if got := launched(func(k string) string { return vars[k] }); got != want {
			t.Errorf("%q: launched = %v, want %v", env, got, want)
		}
	}
}

// TestInProcessFiles runs the ranks in process and reads every output file
// back: the tables, the JSON report, the CSV and the SVG.
func TestInProcessFiles(t *testing.T) {
	dir := t.TempDir()
	js, cs, svg := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.csv"), filepath.Join(dir, "r.svg")
	args := append([]string{"-inprocess", "-network", "memory", "-np", "3", "-json", js, "-csv", cs, "-plot", svg}, quickArgs...)
	var out, errOut bytes.Buffer
	if code := run(args, &out, &errOut, func(string) string { return "" }); code != 0 {
		t.Fatalf("exit %d:\n%s\n%s", code, out.String(), errOut.String())
	}
	rows := regexp.MustCompile(`(?m)^ +\d+ +\d+ +float +\S+ +-1 .*$`).FindAllString(out.String(), -1)
	// allreduce at 8, 64 and 512 B; allgather in whole blocks of 3 floats: 60 and 504 B (8 rounds to 0).
	if len(rows) != 5 {
		t.Errorf("%d rows, want 5:\n%s", len(rows), out.String())
	}
	var r report
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Schema != reportSchema || !r.Complete || r.Run.Ranks != 3 || r.Run.GoVersion == "" || len(r.Run.CommandLine) != len(args)+1 ||
		r.Settings.Type != "float" || !r.Settings.InPlace || r.Settings.Average != "avg" || len(r.Rows) != len(rows) || len(r.Tables) != 2 {
		t.Errorf("report: %s", b)
	}
	for _, row := range r.Rows {
		if row.OutOfPlace.Wrong == nil || *row.OutOfPlace.Wrong != 0 || row.InPlace == nil || row.InPlace.Wrong == nil || *row.InPlace.Wrong != 0 || row.OutOfPlace.TimeUS <= 0 {
			t.Errorf("report row %+v: want both forms measured and checked", row)
		}
	}
	// Every key is snake_case.
	for _, k := range regexp.MustCompile(`"([A-Za-z_]+)":`).FindAllStringSubmatch(string(b), -1) {
		if strings.ToLower(k[1]) != k[1] {
			t.Errorf("key %q is not snake_case", k[1])
		}
	}
	f, err := os.Open(cs)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil || len(recs) != len(rows)+1 || recs[0][0] != "op" || recs[1][0] != "allreduce" {
		t.Errorf("CSV: %v, %v", recs, err)
	}
	b, err = os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Polylines []struct{} `xml:"polyline"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil || len(doc.Polylines) != 4 {
		t.Errorf("SVG: %d polylines (want 2 ops × busbw and time), %v", len(doc.Polylines), err)
	}
}

// freePort is a TCP port nothing listens on (for a moment).
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestExternalLauncher starts 4 processes of the command by hand with
// torchrun's variables (2 nodes of 2 ranks, told apart by GROUP_RANK), as
// torchrun would: each joins with hiercomm.Init, and rank 0 alone prints
// the tables, of the hierarchy against its flat world.
func TestExternalLauncher(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	port := freePort(t)
	const world, perNode = 4, 2
	outs := make([]bytes.Buffer, world)
	errs := make([]bytes.Buffer, world)
	codes := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		cmd := command(ctx, append([]string{"-network", "tcp", "-ops", "allreduce", "-e", "1K"}, quickArgs[2:]...),
			fmt.Sprintf("RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", world), fmt.Sprintf("LOCAL_RANK=%d", r%perNode),
			fmt.Sprintf("LOCAL_WORLD_SIZE=%d", perNode), fmt.Sprintf("GROUP_RANK=%d", r/perNode),
			"MASTER_ADDR=127.0.0.1", fmt.Sprintf("MASTER_PORT=%d", port),
			"HIERCOMM_JOB_ID=bench-external", "HIERCOMM_JOB_KEY=0123456789abcdef0123456789abcdef", "HIERCOMM_NETWORK=tcp")
		cmd.Stdout, cmd.Stderr = &outs[r], &errs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { codes[r] = cmd.Wait() })
	}
	wg.Wait()
	for r := range world {
		if codes[r] != nil {
			t.Errorf("rank %d: %v\n%s", r, codes[r], errs[r].String())
		}
	}
	out := outs[0].String()
	for _, want := range []string{"started by a torchrun-style environment", "# Topology: 4 ranks on 2 nodes, 2 ranks per node",
		"# Collective test starting: all_reduce_perf", "# Out of bounds values : 0 OK", "# Communicator hier\n", "# Communicator flat\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("rank 0's output lacks %q:\n%s", want, out)
		}
	}
	for r := 1; r < world; r++ {
		if outs[r].Len() != 0 {
			t.Errorf("rank %d printed on stdout:\n%s", r, outs[r].String())
		}
	}
}

// TestInterruptKeepsRows starts the command alone (a local job of its own
// ranks), interrupts it once the first operation's table is printed, and
// checks that the rows stay, the second operation's rows measured so far
// are printed in their table, closed, the JSON report holds them marked
// incomplete, and every rank is gone.
func TestInterruptKeepsRows(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local job")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	js := filepath.Join(t.TempDir(), "r.json")
	cmd := command(ctx, []string{"-np", "2", "-nodes", "1", "-network", "tcp", "-ops", "allreduce,allgather", "-b", "8", "-e", "64M", "-link-rate", "off", "-switch", "off", "-budget", "50ms", "-json", js})
	pr, pw := io.Pipe()
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = pw, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); pw.Close() }()
	var out strings.Builder
	buf := make([]byte, 4096)
	signalled := false
	for {
		n, err := pr.Read(buf)
		out.Write(buf[:n])
		if !signalled && strings.Contains(out.String(), "# Collective test concluded: all_reduce_perf\n") {
			cmd.Process.Signal(syscall.SIGINT)
			signalled = true
		}
		if err != nil {
			break
		}
	}
	err := <-done
	if !signalled {
		t.Fatalf("the run ended (%v) before allreduce's table:\n%s\n%s", err, out.String(), errOut.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit %d after Ctrl-C, want 1", code)
	}
	text := out.String()
	rows := len(regexp.MustCompile(`(?m)^ +\d+ +\d+ +float `).FindAllString(text, -1))
	for _, want := range []string{"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : ", "# Collective test concluded: all_gather_perf\n", "# Stopped before the end:"} {
		if !strings.Contains(text, want) {
			t.Errorf("output after Ctrl-C lacks %q:\n%s", want, text)
		}
	}
	var r report
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatalf("no report after Ctrl-C: %v\n%s", err, errOut.String())
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Complete || len(r.Rows) != rows || r.Error == "" {
		t.Errorf("report after Ctrl-C: complete %v, %d rows (printed %d), error %q, %v", r.Complete, len(r.Rows), rows, r.Error, err)
	}
}

// TestLocalJobChoices runs the command alone (a local job of 4 ranks on 2
// emulated nodes) measuring one communicator, or one side of the
// topology, and checks what the tables say was measured.
func TestLocalJobChoices(t *testing.T) {
	if testing.Short() {
		t.Skip("starts local jobs")
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-impl", "flat"}, []string{"#   flat   nexar over tcp, every rank", "# 4 ranks;", "# Avg bus bandwidth    : ",
			"# The machine's floor: raw TCP sockets (8 bytes by blocking write(2) and read(2), no frames) between rank 0 and rank 2: round trip ",
			"# The machine's floor among all 4 ranks at once: an 8-byte recursive-doubling exchange over raw sockets (log2 4 rounds) ",
			"# nexar's own frames (tcp, no communicator) between rank 0 and rank 2: 8-byte round trip ",
			"# nexar's own frames among all 4 ranks at once: ",
			"#   raw latency: allreduce at 8 B on flat / the floor's round trip (raw sockets) = ",
			"#   ours: nexar's frames' round trip / the floor's = "}},
		{[]string{"-split", "inter"}, []string{"# Split: measuring only across nodes", "#   inter  nexar over tcp, one rank per node", "# 2 ranks;"}},
		{[]string{"-split", "intra"}, []string{"#   intra  shared memory between the processes of a node", "# 2 ranks;"}},
		{[]string{"-nodes", "4", "-split", "inter"}, []string{"#   inter  nexar over tcp, one rank per node", "# 4 ranks;"}}, // a flat world, split by the topology
		{[]string{"-compare", "flat,hier"}, []string{"# Communicator flat\n# Collective test starting: all_reduce_perf\n", "# Communicator hier\n", "# allreduce: hier vs flat"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		args := append([]string{"-np", "4", "-nodes", "2", "-network", "tcp", "-link-rate", "off", "-ops", "allreduce", "-e", "1K", "-f", "8", "-n", "2", "-repeats", "1", "-switch", "off"}, tc.args...)
		cmd := command(ctx, args)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Errorf("%v: %v\n%s", tc.args, err, errOut.String())
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, w, out.String())
			}
		}
	}
}

func TestSimulateFlags(t *testing.T) {
	if n, g, err := parseSimulate("128x8"); err != nil || n != 128 || g != 8 {
		t.Errorf("128x8: %d %d %v", n, g, err)
	}
	for _, bad := range []string{"128", "0x8", "x8", "128x", "1000x1000"} {
		if _, _, err := parseSimulate(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for in, want := range map[string]float64{"900GB/s": 900e9, "50 GB/s": 50e9, "400gbit": 50e9, "500MB/s": 500e6} {
		if got, err := parseBytesRate(in); err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	if _, err := parseBytesRate("fast"); err == nil {
		t.Error("fast accepted")
	}
}

// TestSimulateInProcess runs the ranks in process with -simulate: the
// model fitted from the run's sendrecv, its error table, and the
// predictions at a small scale.
func TestSimulateInProcess(t *testing.T) {
	args := []string{"-inprocess", "-network", "memory", "-np", "4", "-ops", "allreduce,sendrecv", "-b", "1K", "-e", "1M", "-f", "32", "-n", "2", "-repeats", "1", "-simulate", "4x2", "-sim-link", "1gbit"}
	var out, errOut bytes.Buffer
	if code := run(args, &out, &errOut, func(string) string { return "" }); code != 0 {
		t.Fatalf("exit %d:\n%s\n%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"# Simulation: an alpha-beta model fitted from this run's flat sendrecv:", "#     median", "within 25%",
		"# The run against itself: out of place and in place (one schedule, a copy apart) differ by more than 25% at ",
		"# At scale, predicted (one call alone): 8 ranks, 4 nodes of 2;", "0.125 GB/s each way (-sim-link)",
		"# Run for real on 8 ranks over nexar's in-memory transport", "allreduce 0 wrong; allgather 0 wrong; reducescatter 0 wrong; broadcast 0 wrong;"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// Without sendrecv there is nothing to fit, and the output says so.
	out.Reset()
	args[6] = "allreduce"
	if code := run(args, &out, &errOut, func(string) string { return "" }); code != 0 || !strings.Contains(out.String(), "add sendrecv to -ops") {
		t.Errorf("exit %d:\n%s", code, out.String())
	}
}
