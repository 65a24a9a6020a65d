package hiercomm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nexar"
)

// The GPU tier of Init on a real GPU: real processes started through the
// local launcher (startJob, init_test.go), each its own single-GPU node,
// all on GPU 0 of this host (HIERCOMM_DEVICE=0). NCCL refuses two ranks of
// one communicator on one GPU; with one rank per node every NCCL
// communicator has one rank, and the World is nccl.Staged over nexar:
// device data staged through page-locked host memory between the nodes.
// These tests run on a GPU host (make gpu-test, gpu-bin/run.sh) and skip
// elsewhere with nccl.Available's reason.

// gpuEnv is every GPU child's environment: the GPU tier required (Init
// fails, saying why, if it cannot be had), on GPU 0.
func gpuEnv() []string {
	return []string{launchenv.EnvIntra + "=nccl", launchenv.EnvDevice + "=0"}
}

// skipWithoutGPU skips the test, with the reason, unless this process can
// use a GPU.
func skipWithoutGPU(t *testing.T) {
	t.Helper()
	if err := nccl.Available(); err != nil {
		t.Skipf("no GPU here: %v", err)
	}
}

// gpuChild plays the GPU roles of this file's children (the test binary is
// the program, envRole says which part to play, as in init_test.go); ran
// is false for any other role.
func gpuChild(role string) (ran bool, err error) {
	switch role {
	case "gpu-conformance":
		return true, gpuConformance()
	case "gpu-kill":
		return true, gpuKilled()
	case "gpu-bench":
		return true, gpuBench()
	case "gpu-shrink":
		return true, gpuShrink() // gpu_shrink_multiproc_test.go
	case "gpu-grow":
		return true, gpuGrow()
	case "gpu-grow-newcomer":
		return true, gpuGrowNewcomer()
	}
	return false, nil
}

// gpuWorld checks that w is what a world of single-GPU nodes must be: a
// World that moves device memory, staged over the host mesh.
func gpuWorld(w *hiercomm.World) (*nccl.Device, *nccl.Staged, error) {
	dev := w.Device()
	if dev == nil {
		return nil, nil, fmt.Errorf("rank %d: %s=nccl, but the World moves host memory (it runs on %T)", w.Rank(), launchenv.EnvIntra, w.Communicator)
	}
	staged, ok := w.Communicator.(*nccl.Staged)
	if !ok {
		return nil, nil, fmt.Errorf("rank %d runs on %T, want *nccl.Staged (one GPU per node)", w.Rank(), w.Communicator)
	}
	return dev, staged, nil
}

// gpuConformance is the child of TestGPUConformanceMultiProcess: Init, then
// every suite with every buffer in device memory.
func gpuConformance() error {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	w, err := hiercomm.Init(ctx, hiercomm.Options{})
	if err != nil {
		return err
	}
	defer w.Close()
	dev, _, err := gpuWorld(w)
	if err != nil {
		return err
	}
	all := commtest.Options{Timeout: 2 * time.Minute, Counts: []int{0, 1, 7, 4099, 1000003}, Memory: dev}
	// The suites about behaviour rather than arithmetic stay small.
	few := all
	few.Counts = []int{0, 1, 7, 4099}
	for _, s := range []struct {
		name string
		run  func(context.Context, comm.Communicator, commtest.Options) error
		opt  commtest.Options
	}{
		{"conformance", commtest.RunRank, all},
		{"p2p", commtest.P2PRank, few},
		{"nonblocking", commtest.NonBlockingRank, few},
		{"split", commtest.SplitRank, few},
		{"badinput", commtest.BadInputRank, few},
		{"mismatch", commtest.MismatchRank, few},
	} {
		start := time.Now()
		if err := s.run(ctx, w, s.opt); err != nil {
			return fmt.Errorf("rank %d: %s: %w", w.Rank(), s.name, err)
		}
		fmt.Printf("rank %d: %s passed in %v\n", w.Rank(), s.name, time.Since(start).Round(time.Millisecond))
	}
	fmt.Printf("gpu conformance ok: rank %d of %d via %T on %v\n", w.Rank(), w.Size(), w.Communicator, dev)
	return nil
}

// TestGPUConformanceMultiProcess runs every suite on device buffers over
// 2 and 4 single-GPU nodes, over QUIC and over TCP.
func TestGPUConformanceMultiProcess(t *testing.T) {
	skipWithoutGPU(t)
	for _, network := range []string{"quic", "tcp"} {
		for _, nodes := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s %d nodes", network, nodes), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
				defer cancel()
				out := &lines{marker: "gpu conformance ok", ch: make(chan struct{}, 1)}
				spec := cluster.LocalSpec{RanksPerNode: slices.Repeat([]int{1}, nodes), Network: network, Env: gpuEnv()}
				start := time.Now()
				job := startJob(t, ctx, spec, "gpu-conformance", out)
				if err := job.Wait(); err != nil {
					t.Fatalf("%v\n%s", err, tail(out.String(), 80))
				}
				if out.count != nodes {
					t.Fatalf("%d of %d ranks passed\n%s", out.count, nodes, tail(out.String(), 80))
				}
				t.Logf("%d ranks passed in %v\n%s", nodes, time.Since(start).Round(time.Second), grepLines(out.String(), "passed in", "gpu conformance ok"))
			})
		}
	}
}

// The kill test: its transport failure timeout, and the rank killed.
const (
	gpuFailureTimeout = 3 * time.Second
	gpuVictim         = 1
)

// gpuKilled is the child of TestGPUKillRank: every rank runs AllReduce on
// 4 MiB of device memory in a loop, says it is ready after a few rounds,
// and goes on until a collective fails; the victim waits to be killed
// (SIGKILL) in the loop. A survivor's failure must name the victim; it
// prints when it came (the parent knows when it killed) and what it said.
func gpuKilled() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, err := hiercomm.Init(ctx, hiercomm.Options{FailureTimeout: gpuFailureTimeout})
	if err != nil {
		return err
	}
	defer w.Close()
	dev, _, err := gpuWorld(w)
	if err != nil {
		return err
	}
	const n = 1 << 20 // f32: 4 MiB
	send, err := gpuFilled(dev, n, float32(w.Rank()+1))
	if err != nil {
		return err
	}
	defer dev.Free(send)
	recv, err := dev.Alloc(comm.F32, n)
	if err != nil {
		return err
	}
	defer dev.Free(recv)
	for i := 0; ; i++ {
		err := w.AllReduce(ctx, send, recv, comm.Sum)
		at := time.Now()
		if err != nil {
			victim := fmt.Sprintf("rank %d", gpuVictim)
			switch {
			case w.Rank() == gpuVictim:
				return fmt.Errorf("rank %d, to be killed, failed first (round %d): %w", w.Rank(), i, err)
			case !errors.Is(err, comm.ErrPeerFailed) || !strings.Contains(err.Error(), victim):
				return fmt.Errorf("rank %d: AllReduce round %d with %s killed returned %v, want a failure naming %s", w.Rank(), i, victim, err, victim)
			}
			fmt.Printf("gpu-kill seen: rank %d at %d after %d rounds: %v\n", w.Rank(), at.UnixNano(), i, err)
			return nil
		}
		if i == 3 {
			fmt.Printf("gpu-kill-ready: rank %d\n", w.Rank())
		}
	}
}

// gpuSeen matches a survivor's report: its rank, when its collective
// failed (Unix nanoseconds) and the error.
var gpuSeen = regexp.MustCompile(`gpu-kill seen: rank (\d+) at (\d+) after \d+ rounds: (.*)`)

// TestGPUKillRank kills one of 3 single-GPU nodes (QUIC) while all run
// AllReduce on device buffers, and checks that every survivor's
// collective fails with an error naming it within twice the failure
// timeout. It is TestKilledProcessIsReportedOnEverySurvivor with device
// buffers, the data in flight, and the transport's timeout as the bound.
func TestGPUKillRank(t *testing.T) {
	skipWithoutGPU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 3
	out := &lines{marker: "gpu-kill-ready", ch: make(chan struct{}, n)}
	job := startJob(t, ctx, cluster.LocalSpec{RanksPerNode: []int{1, 1, 1}, Network: "quic", KeepOthers: true, Env: gpuEnv()}, "gpu-kill", out)
	killWhenReady(t, ctx, job, out, n, gpuVictim)
	killedAt := time.Now()
	errs := job.Errors()
	for r, err := range errs {
		var exit *cluster.LocalExitError
		switch {
		case r == gpuVictim && !(errors.As(err, &exit) && exit.ExitCode() == 128+9):
			t.Errorf("rank %d exited with %v, want killed (SIGKILL)", r, err)
		case r != gpuVictim && err != nil:
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if t.Failed() {
		t.Fatal(tail(out.String(), 60))
	}
	bound := 2 * gpuFailureTimeout
	seen := map[int]bool{}
	for _, m := range gpuSeen.FindAllStringSubmatch(out.String(), -1) {
		r, _ := strconv.Atoi(m[1])
		ns, _ := strconv.ParseInt(m[2], 10, 64)
		took := time.Unix(0, ns).Sub(killedAt)
		seen[r] = true
		t.Logf("rank %d: its AllReduce failed %v after the kill: %s", r, took.Round(time.Millisecond), m[3])
		if took > bound {
			t.Errorf("rank %d took %v after the kill to fail, want at most %v (2 × FailureTimeout)", r, took, bound)
		}
		if !strings.Contains(m[3], fmt.Sprintf("rank %d", gpuVictim)) {
			t.Errorf("rank %d's error does not name rank %d: %s", r, gpuVictim, m[3])
		}
	}
	for r := range n {
		if r != gpuVictim && !seen[r] {
			t.Errorf("rank %d reported no failure", r)
		}
	}
	if t.Failed() {
		t.Log(tail(out.String(), 60))
	}
}

// gpuFilled is n elements of f32 on dev, each v.
func gpuFilled(dev *nccl.Device, n int, v float32) (comm.Buffer, error) {
	b, err := dev.Alloc(comm.F32, n)
	if err != nil {
		return comm.Buffer{}, err
	}
	x := make([]float32, n)
	for i := range x {
		x[i] = v
	}
	if err := dev.Write(b, comm.Host(x).Bytes()); err != nil {
		dev.Free(b)
		return comm.Buffer{}, err
	}
	return b, nil
}

// The benchmark's sizes (bytes of each rank's send buffer, f32) and
// rounds: warmup, then timed.
var (
	gpuBenchSizes                  = []int{4 << 20, 16 << 20, 64 << 20}
	gpuBenchWarmup, gpuBenchRounds = 2, 9
)

// gpuBench is the child of TestGPUBenchDeviceVsHost: AllReduce and
// ReduceScatter of f32, device buffers through the World (staged through
// page-locked memory) against host buffers through the host communicator
// underneath it, interleaved round by round on the same processes. Rank 0
// prints the table, and first the copy rates of its GPU.
func gpuBench() error {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	w, err := hiercomm.Init(ctx, hiercomm.Options{})
	if err != nil {
		return err
	}
	defer w.Close()
	dev, staged, err := gpuWorld(w)
	if err != nil {
		return err
	}
	host := staged.Inner()
	if w.Rank() == 0 {
		rates, err := gpuCopyRates(ctx, dev)
		if err != nil {
			return err
		}
		fmt.Print(rates)
	}
	if err := host.Barrier(ctx); err != nil {
		return err
	}
	p := w.Size()
	var table strings.Builder
	fmt.Fprintf(&table, "bench: %d single-GPU nodes over %s, f32, sum; busbw in GB/s (nccl-tests' factors), time: median of %d rounds, slowest rank\n",
		p, os.Getenv(launchenv.EnvNetwork), gpuBenchRounds)
	fmt.Fprintf(&table, "bench: %-14s %8s %12s %12s %12s %12s %8s\n", "op", "size", "device ms", "host ms", "device busbw", "host busbw", "dev/host")
	for _, kind := range []comm.Kind{comm.KindAllReduce, comm.KindReduceScatter} {
		for _, size := range gpuBenchSizes {
			dt, ht, err := gpuBenchCase(ctx, w, host, dev, kind, size/4)
			if err != nil {
				return fmt.Errorf("rank %d: %v of %d MiB: %w", w.Rank(), kind, size>>20, err)
			}
			factor := float64(p-1) / float64(p) // ReduceScatter
			if kind == comm.KindAllReduce {
				factor *= 2
			}
			busBW := func(d time.Duration) float64 { return float64(size) / d.Seconds() / 1e9 * factor }
			fmt.Fprintf(&table, "bench: %-14v %5d MiB %12.2f %12.2f %12.2f %12.2f %8.2f\n", kind, size>>20,
				float64(dt.Microseconds())/1e3, float64(ht.Microseconds())/1e3, busBW(dt), busBW(ht), busBW(dt)/busBW(ht))
		}
	}
	if w.Rank() == 0 {
		fmt.Print(table.String())
		fmt.Println("bench: goal: device ≥ 0.9 × host (reported, not asserted)")
	}
	fmt.Printf("gpu-bench ok: rank %d\n", w.Rank())
	return nil
}

// gpuBenchCase times one collective of n f32 per rank, device buffers
// through w and host buffers through host, interleaved: each round runs
// both, each after a barrier. It checks both results once (rank r sends
// r+1 everywhere) and returns, for each path, the median over the rounds
// of the slowest rank's time.
func gpuBenchCase(ctx context.Context, w *hiercomm.World, host comm.Communicator, dev *nccl.Device, kind comm.Kind, n int) (device, onHost time.Duration, err error) {
	p, rank := w.Size(), w.Rank()
	recvN := n
	if kind == comm.KindReduceScatter {
		recvN = n / p
	}
	dSend, err := gpuFilled(dev, n, float32(rank+1))
	if err != nil {
		return 0, 0, err
	}
	defer dev.Free(dSend)
	dRecv, err := dev.Alloc(comm.F32, recvN)
	if err != nil {
		return 0, 0, err
	}
	defer dev.Free(dRecv)
	hSend, hRecv := make([]float32, n), make([]float32, recvN)
	for i := range hSend {
		hSend[i] = float32(rank + 1)
	}
	run := func(c comm.Communicator, send, recv comm.Buffer) error {
		return c.Start(ctx, comm.Call{Kind: kind, Send: send, Recv: recv, Op: comm.Sum}).Wait()
	}
	// times[0:rounds] are the device's, times[rounds:] the host's (ns).
	rounds := gpuBenchWarmup + gpuBenchRounds
	times := make([]float64, 2*gpuBenchRounds)
	for i := range rounds {
		for j, path := range []func() error{
			func() error { return run(w, dSend, dRecv) },
			func() error { return run(host, comm.Host(hSend), comm.Host(hRecv)) },
		} {
			if err := host.Barrier(ctx); err != nil {
				return 0, 0, err
			}
			start := time.Now()
			if err := path(); err != nil {
				return 0, 0, err
			}
			if i >= gpuBenchWarmup {
				times[j*gpuBenchRounds+i-gpuBenchWarmup] = float64(time.Since(start).Nanoseconds())
			}
		}
		if i == 0 {
			if err := gpuBenchCheck(dev, dRecv, hRecv, float32(p*(p+1)/2)); err != nil {
				return 0, 0, err
			}
		}
	}
	if err := host.AllReduce(ctx, comm.Host(times), comm.Host(times), comm.Max); err != nil {
		return 0, 0, err
	}
	median := func(ts []float64) time.Duration {
		ts = slices.Clone(ts)
		slices.Sort(ts)
		return time.Duration(ts[len(ts)/2])
	}
	return median(times[:gpuBenchRounds]), median(times[gpuBenchRounds:]), nil
}

// gpuBenchCheck checks that both results hold want everywhere.
func gpuBenchCheck(dev *nccl.Device, dRecv comm.Buffer, hRecv []float32, want float32) error {
	got := make([]float32, dRecv.Len())
	if err := dev.Read(comm.Host(got).Bytes(), dRecv); err != nil {
		return err
	}
	for what, xs := range map[string][]float32{"device": got, "host": hRecv} {
		if i := slices.IndexFunc(xs, func(x float32) bool { return x != want }); i >= 0 {
			return fmt.Errorf("%s result: element %d is %v, want %v", what, i, xs[i], want)
		}
	}
	return nil
}

// gpuCopyRates measures, on dev, what staging costs: a Broadcast of a
// device buffer through an nccl.Staged over a world of one (a copy to
// page-locked memory and back: D2H + H2D, bytes counted both ways), and
// Device.Write and Read of Go memory (pageable). nccl.test's
// TestGPUCopyRates gives the page-locked copies each way apart.
func gpuCopyRates(ctx context.Context, dev *nccl.Device) (string, error) {
	one, err := nexar.NewMemoryWorld(1, nexar.Options{})
	if err != nil {
		return "", err
	}
	staged := nccl.NewStaged(one[0], dev)
	defer staged.Close()
	var out strings.Builder
	fmt.Fprintf(&out, "copies: %v, GB/s (median of %d)\n", dev, gpuBenchRounds)
	fmt.Fprintf(&out, "copies: %8s %22s %14s %14s\n", "size", "pinned D2H+H2D (both)", "pageable H2D", "pageable D2H")
	for _, size := range gpuBenchSizes {
		buf, err := dev.Alloc(comm.U8, size)
		if err != nil {
			return "", err
		}
		page := make([]byte, size)
		var rates [3]float64
		for k, f := range []func() error{
			func() error { return staged.Broadcast(ctx, buf, 0) },
			func() error { return dev.Write(buf, page) },
			func() error { return dev.Read(page, buf) },
		} {
			ts := make([]time.Duration, gpuBenchWarmup+gpuBenchRounds)
			for i := range ts {
				start := time.Now()
				if err := f(); err != nil {
					dev.Free(buf)
					return "", err
				}
				ts[i] = time.Since(start)
			}
			ts = ts[gpuBenchWarmup:]
			slices.Sort(ts)
			moved := float64(size)
			if k == 0 {
				moved *= 2
			}
			rates[k] = moved / ts[len(ts)/2].Seconds() / 1e9
		}
		dev.Free(buf)
		fmt.Fprintf(&out, "copies: %4d MiB %22.1f %14.1f %14.1f\n", size>>20, rates[0], rates[1], rates[2])
	}
	return out.String(), nil
}

// TestGPUBenchDeviceVsHost runs gpuBench on 2 single-GPU nodes over TCP
// and logs its tables. Speed is reported, never asserted; the results are
// checked.
func TestGPUBenchDeviceVsHost(t *testing.T) {
	skipWithoutGPU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	out := &lines{marker: "gpu-bench ok", ch: make(chan struct{}, 1)}
	job := startJob(t, ctx, cluster.LocalSpec{RanksPerNode: []int{1, 1}, Network: "tcp", Env: gpuEnv()}, "gpu-bench", out)
	if err := job.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, tail(out.String(), 60))
	}
	if out.count != 2 {
		t.Fatalf("%d of 2 ranks finished\n%s", out.count, tail(out.String(), 60))
	}
	t.Logf("\n%s", grepLines(out.String(), "copies: ", "bench: "))
}

// grepLines is the lines of s that contain any of subs.
func grepLines(s string, subs ...string) string {
	var keep []string
	for l := range strings.Lines(s) {
		for _, sub := range subs {
			if strings.Contains(l, sub) {
				keep = append(keep, strings.TrimRight(l, "\n"))
				break
			}
		}
	}
	return strings.Join(keep, "\n")
}
