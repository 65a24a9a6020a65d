package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/examples/internal/launch"
	"github.com/hiercomm/hiercomm/nccl"
)

// The test binary is started again as each rank of a local job; an
// argument -fault=NAME plants that fault (fault.go) in the rank.
func TestMain(m *testing.M) {
	launch.TestMainPlanting(m, func(name string) (err error) {
		inject, err = parseFault(name)
		return err
	}, func(args []string) error { return run(context.Background(), args) })
}

// parseFault reads a fault's name.
func parseFault(s string) (fault, error) {
	switch f := fault(s); f {
	case faultSum, faultMissing, faultStale, faultShare:
		return f, nil
	}
	return "", fmt.Errorf("fault %q: want sum, missing, stale or share", s)
}

// TestTrainsOnTwoNodes trains a few steps on 2 nodes × 2 ranks (the
// hierarchical world) on a slice of MNIST with a small net (the race
// detector slows the passes tenfold), a bucket per layer so that
// AllReduces overlap backward, and relies on the example's own
// checks: every replica bitwise identical, and in each of the 12 steps
// the averaged gradient one process's at the same weights (rank 0
// computes it; every rank fails the job when the check fails).
func TestTrainsOnTwoNodes(t *testing.T) {
	out := launch.Run(t, []int{2, 2}, "-train 2048 -test 512 -batch 64 -steps 12 -log 4 -check-steps 12 -hidden 128,64 -bucket-mib 0.01")
	launch.Expect(t, out,
		"4 ranks on 2 nodes",
		"gradient buckets in backward order (cap 0.01 MiB): [layer 2 (0.00 MiB) layer 1 (0.03 MiB) layer 0 (0.38 MiB)]",
		"step    12/12",
		"communication hidden",
		"test accuracy",
		"gradient check, steps 1-12: the 4 ranks' averaged gradient against one process's",
		"every element within its bound: yes",
		"all 4 replicas hold bitwise identical weights",
	)
	if strings.Contains(out, "one process on the same") {
		t.Error("compared the trajectories of an Adam run with one process's: not sound")
	}
}

// small is a run of a few steps of a small net, a bucket per layer.
const small = "-train 512 -test 128 -batch 64 -steps 4 -log 4 -check-steps 4 -hidden 64,32 -bucket-mib 0.004"

// TestGradientCheckPasses: correct runs on 2 × 1, 2 × 2 and 4 × 1 ranks,
// with Adam and with SGD, pass the gradient check at every step (and with
// SGD the comparison of the trajectories, which is sound there).
func TestGradientCheckPasses(t *testing.T) {
	for _, layout := range [][]int{{1, 1}, {2, 2}, {1, 1, 1, 1}} {
		for _, opt := range []string{"adam", "sgd"} {
			out := launch.Run(t, layout, small+" -opt "+opt)
			launch.Expect(t, out, "gradient check, steps 1-4", "every element within its bound: yes")
			if opt == "sgd" {
				launch.Expect(t, out, "same loss as one process: yes")
			}
		}
	}
}

// TestGradientCheckCatchesFaults plants, in turn, each bug a
// data-parallel reduction can have, and sees the check fail at the step
// it shows in: the gradients summed instead of averaged, the last bucket
// (the first layer's, the loosest bound) never reduced or one step stale,
// and rank 1 training on rank 0's share of the batch.
func TestGradientCheckCatchesFaults(t *testing.T) {
	for _, c := range []struct {
		fault  fault
		layout []int
		step   int
	}{
		{faultSum, []int{2, 2}, 1},
		{faultMissing, []int{1, 1}, 1},
		{faultStale, []int{1, 1}, 2},
		{faultShare, []int{1, 1, 1, 1}, 1},
	} {
		out := launch.RunFailing(t, c.layout, small+" -fault="+string(c.fault))
		want := fmt.Sprintf("the gradient the %d ranks averaged in step %d is not one process's at the same weights", c.layout[0]*len(c.layout), c.step)
		if !strings.Contains(out, want) {
			t.Errorf("fault %s: the output lacks %q:\n%s", c.fault, want, out)
		}
	}
}

// TestTrainsOnDevice trains on 2 single-GPU nodes with -device on nccl's
// in-process fake (the parameters and the gradient buckets in device
// memory, the AllReduces on device buffers, staged between the nodes) and
// the same run on host memory: the device run passes the example's own
// checks (replicas bitwise identical, each step's averaged gradient one
// process's at the same weights) and ends with the host run's weights,
// bit for bit.
func TestTrainsOnDevice(t *testing.T) {
	const args = "-train 1024 -test 256 -batch 64 -steps 8 -log 4 -check-steps 8 -hidden 128,64 -bucket-mib 0.01"
	dev := launch.Run(t, []int{1, 1}, args+" -device -fake-gpu")
	launch.Expect(t, dev,
		"2 ranks on 2 nodes",
		"on device 0 (fake GPU 0): parameters and gradient in device memory (0.83 MiB per rank)",
		"host↔device copies",
		"all 2 replicas hold bitwise identical weights",
		"every element within its bound: yes",
	)
	host := launch.Run(t, []int{1, 1}, args)
	if d, h := weightsHash(t, dev), weightsHash(t, host); d != h {
		t.Errorf("the device run ends with weights %s, the host run with %s", d, h)
	}
}

// weightsHash is the hash of the replicas' weights that rank 0 printed.
func weightsHash(t *testing.T, out string) string {
	t.Helper()
	m := regexp.MustCompile(`bitwise identical weights \(hash ([0-9a-f]{16})\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no hash of the weights in:\n%s", out)
	}
	return m[1]
}

// TestDeviceNeedsAGPU: -device where the GPU tier cannot be had (no
// -fake-gpu, no driver or no GPU) stops before any work with one line
// that says why and what to do.
func TestDeviceNeedsAGPU(t *testing.T) {
	if nccl.Available() == nil {
		t.Skip("a GPU is usable here: -device would train on it")
	}
	err := run(context.Background(), strings.Fields("-device -steps 1 -train 64 -test 64 -batch 64"))
	if err == nil {
		t.Fatal("-device without a GPU: accepted")
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "-device needs the GPU tier") || !strings.Contains(msg, "-fake-gpu") {
		t.Errorf("want one line naming -device and -fake-gpu, got %q", msg)
	}
}

// TestBadFlags: a flag the trainer cannot honour is an error before any
// work, naming the flag.
func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-bucket-mib", "0"},
		{"-check-steps", "-1"},
		{"-comm-procs", "-1"},
		{"-hidden", "64,x"},
		{"extra"},
	} {
		if _, err := parse(args); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
}
