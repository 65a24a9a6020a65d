package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/examples/internal/launch"
)

// The test binary is started again as each rank of a local job; an
// argument -fault=NAME plants that fault (fault.go) in the rank.
func TestMain(m *testing.M) {
	launch.TestMainPlanting(m, func(name string) (err error) {
		inject, err = parseFault(name)
		return err
	}, func(args []string) error { return run(context.Background(), args, os.Stdout) })
}

// parseFault reads a fault's name.
func parseFault(s string) (fault, error) {
	switch f := fault(s); f {
	case faultSum, faultChunk, faultMissing, faultStale:
		return f, nil
	}
	return "", fmt.Errorf("fault %q: want sum, chunk, missing or stale", s)
}

const args = "-train 1024 -test 256 -batch 64 -steps 6 -hidden 128,64"

// persistentBytes reads each stage's persistent memory per rank from
// rank 0's lines.
func persistentBytes(t *testing.T, out string) map[int]int {
	t.Helper()
	re := regexp.MustCompile(`stage (\d): memory per rank \(N=\d+\): .* \((\d+) bytes\)`)
	got := map[int]int{}
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		s, _ := strconv.Atoi(m[1])
		b, _ := strconv.Atoi(m[2])
		got[s] = b
	}
	if len(got) != 4 {
		t.Fatalf("found the memory of %d stages, want 4:\n%s", len(got), out)
	}
	return got
}

// TestShardsOnTwoNodes runs every stage on one process, on 2 nodes × 1
// rank and on 2 nodes × 2 ranks (hierarchical). In each world the
// example checks itself (stage 1 bitwise equal to stage 0, stage 3 to
// stage 2, the reduced gradients of stages 0 and 2 one process's at the
// same weights in the first 5 steps; it fails otherwise); the test checks that each stage's memory per rank falls as 1/N as ZeRO
// says: stage 1 shards the optimizer state, stage 2 the gradients too,
// stage 3 everything.
func TestShardsOnTwoNodes(t *testing.T) {
	var one strings.Builder
	if err := run(context.Background(), strings.Fields(args), &one); err != nil {
		t.Fatalf("%v\n%s", err, one.String())
	}
	mem := map[int]map[int]int{1: persistentBytes(t, one.String())}
	for _, layout := range [][]int{{1, 1}, {2, 2}} {
		out := launch.Run(t, layout, args)
		launch.Expect(t, out,
			"stage 0: gradient check, steps 1-5",
			"stage 1: bitwise equal to stage 0: true",
			"stage 2: gradient check, steps 1-5",
			"stage 2: against stage 0: bitwise equal",
			"stage 3: bitwise equal to stage 2: true")
		if n := strings.Count(out, "every element within its bound: yes"); n != 2 {
			t.Errorf("%d gradient checks passed, want 2 (stages 0 and 2)", n)
		}
		mem[layout[0]*len(layout)] = persistentBytes(t, out)
	}
	// Bytes per parameter kept whole and sharded, with Adam (4-byte
	// parameters and gradients, two 4-byte moments).
	whole := map[int]int{0: 16, 1: 8, 2: 4, 3: 0}
	psi := mem[1][0] / 16 // the parameters
	for n, m := range mem {
		for stage, got := range m {
			sharded := 16 - whole[stage]
			want := whole[stage]*psi + sharded*psi/n
			// Each layer's chunk is padded to a multiple of N: at most N−1
			// elements per layer (4 of them), each of sharded/4 floats.
			slack := 4 * (n - 1) * sharded
			if got < want || got > want+slack {
				t.Errorf("N=%d, stage %d: %d bytes per rank, want %d (+ up to %d of padding)", n, stage, got, want, slack)
			}
		}
	}
	t.Log(fmt.Sprint(mem))
}

// TestShardsOnDevice runs ZeRO with -device on nccl's in-process fake:
// what the collectives move in device memory, every AllReduce,
// ReduceScatter and AllGather on device buffers. On 2 single-GPU nodes,
// every stage passes the example's own checks (stage 1 bitwise equal to
// 0, 3 to 2, the gradient checks of 0 and 2; the device memory what the
// stage moves) and ends with the weights of the same run on host memory, bit
// for bit; on 4, stages 2 and 3 (the sharded gradient and parameters)
// pass theirs (3 bitwise equal to 2); in one process (an NCCL
// communicator, which refuses host buffers) stage 3 ends as on host
// memory.
func TestShardsOnDevice(t *testing.T) {
	common := []string{
		"on device 0 (fake GPU 0): what the collectives move in device memory",
		"stage 3: device memory per rank",
		"host↔device copies host→device",
		"stage 3: bitwise equal to stage 2: true",
	}
	// One process: the World is an NCCL communicator of one rank.
	var one, oneHost strings.Builder
	for _, r := range []struct {
		args string
		out  *strings.Builder
	}{{args + " -stages 3 -device -fake-gpu", &one}, {args + " -stages 3", &oneHost}} {
		if err := run(context.Background(), strings.Fields(r.args), r.out); err != nil {
			t.Fatalf("%s: %v\n%s", r.args, err, r.out.String())
		}
	}
	launch.Expect(t, one.String(), common[:3]...) // stage 2 did not run
	if d, h := stageHashes(t, one.String(), 1), stageHashes(t, oneHost.String(), 1); !maps.Equal(d, h) {
		t.Errorf("one process: the device run ends with weights %v, the host run with %v", d, h)
	}

	dev := launch.Run(t, []int{1, 1}, args+" -device -fake-gpu")
	launch.Expect(t, dev, append(common, "2 ranks on 2 nodes",
		"stage 1: bitwise equal to stage 0: true",
		"stage 2: gradient check, steps 1-5")...)
	persistentBytes(t, dev) // every stage reported its memory
	host := launch.Run(t, []int{1, 1}, args)
	if d, h := stageHashes(t, dev, 4), stageHashes(t, host, 4); !maps.Equal(d, h) {
		t.Errorf("2 nodes: the device run ends with weights %v, the host run with %v", d, h)
	}
	dev = launch.Run(t, []int{1, 1, 1, 1}, args+" -device -fake-gpu -stages 2,3")
	launch.Expect(t, dev, append(common, "4 ranks on 4 nodes")...)
	stageHashes(t, dev, 2)
}

// stageHashes reads the hash of each stage's final weights from rank 0's
// lines, and fails t unless there are stages of them.
func stageHashes(t *testing.T, out string, stages int) map[int]string {
	t.Helper()
	got := map[int]string{}
	for _, m := range regexp.MustCompile(`stage (\d): loss .* weights hash ([0-9a-f]{16})`).FindAllStringSubmatch(out, -1) {
		s, _ := strconv.Atoi(m[1])
		got[s] = m[2]
	}
	if len(got) != stages {
		t.Fatalf("found the weights of %d stages, want %d:\n%s", len(got), stages, out)
	}
	return got
}

// TestGradientCheck: with SGD on 4 single-rank nodes, stages 0 and 2
// pass the gradient check and stage 2 stays within the tolerance of stage
// 0 (comparing trajectories is sound with SGD); then each bug a sharded
// reduction can have, planted in turn, fails stage 2's or 3's gradient
// check at the step it shows in: the gradients summed instead of
// averaged, every rank given the next rank's chunk (stage 3: the weights'
// shards are gathered for the check too), the first layer's gradient
// never reduced, or one step stale.
func TestGradientCheck(t *testing.T) {
	out := launch.Run(t, []int{1, 1, 1, 1}, args+" -stages 0,2 -opt sgd -lr 0.05")
	launch.Expect(t, out, "stage 0: gradient check, steps 1-5", "stage 2: gradient check, steps 1-5", "stage 2: equal to stage 0 within tolerance")
	for _, c := range []struct {
		fault        fault
		layout       []int
		stage, ranks int
		step         int
	}{
		{faultSum, []int{2, 2}, 2, 4, 1},
		{faultChunk, []int{1, 1, 1, 1}, 3, 4, 1},
		{faultMissing, []int{1, 1}, 2, 2, 1},
		{faultStale, []int{1, 1}, 2, 2, 2},
	} {
		out := launch.RunFailing(t, c.layout, fmt.Sprintf("%s -stages %d -fault=%s", args, c.stage, c.fault))
		want := fmt.Sprintf("stage %d: step %d: the gradient the %d ranks averaged in step %d is not one process's at the same weights", c.stage, c.step, c.ranks, c.step)
		if !strings.Contains(out, want) {
			t.Errorf("fault %s: the output lacks %q:\n%s", c.fault, want, out)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, a := range []string{"-stages 4", "-stages 1,1", "-stages x", "-check-steps -1", "extra"} {
		if _, err := parse(strings.Fields(a)); err == nil {
			t.Errorf("%q: accepted", a)
		}
	}
}
