package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/cluster"
)

// envArgs carries the example's arguments from a test to its ranks.
const envArgs = "DPGOMLX_EXAMPLE_ARGS"

// TestMain makes the test binary serve as the ranks of the jobs the tests
// start (cluster.StartLocal, what `hiercomm run` does): in a rank, it runs
// the example with the arguments the test passed.
func TestMain(m *testing.M) {
	if cluster.IsLocalChild() {
		if err := run(context.Background(), strings.Fields(os.Getenv(envArgs)), os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// job runs the example on layout[n] ranks of emulated node n with args and
// returns its output; it fails t if a rank fails.
func job(t *testing.T, layout []int, args string, limit time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var out strings.Builder // the launcher writes one line at a time
	j, err := cluster.StartLocal(ctx, cluster.LocalSpec{
		RanksPerNode: layout,
		Path:         os.Args[0],
		Args:         []string{"-test.run=^$"},
		Env:          []string{envArgs + "=" + args},
		Stdout:       &out,
		Stderr:       &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	err = j.Wait()
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	return out.String()
}

var (
	accuracyLine = regexp.MustCompile(`test accuracy ([0-9.]+)%`)
	lossLine     = regexp.MustCompile(`loss ([0-9.]+) `)
)

// check fails t unless out says the replicas are identical, the test
// accuracy is at least minAccuracy and the logged loss fell.
func check(t *testing.T, out string, ranks int, minAccuracy float64) {
	t.Helper()
	if want := fmt.Sprintf("all %d replicas hold bitwise identical weights", ranks); !strings.Contains(out, want) {
		t.Errorf("no %q", want)
	}
	m := accuracyLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatal("no test accuracy")
	}
	if acc, _ := strconv.ParseFloat(m[1], 64); acc < minAccuracy {
		t.Errorf("test accuracy %v%%, want at least %v%%", acc, minAccuracy)
	}
	losses := lossLine.FindAllStringSubmatch(out, -1)
	if len(losses) < 2 {
		t.Fatalf("%d loss lines, want 2 or more", len(losses))
	}
	first, _ := strconv.ParseFloat(losses[0][1], 64)
	last, _ := strconv.ParseFloat(losses[len(losses)-1][1], 64)
	if last >= first {
		t.Errorf("loss from %v to %v: it did not fall", first, last)
	}
	for _, want := range []string{"step breakdown", "0 tensor copies"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q", want)
		}
	}
}

// TestTrainsOnTwoByTwo trains on 2 nodes × 2 ranks, one epoch of 8,192
// images at a global batch of 256 (32 steps, about 30 s on 2 cores): the
// loss falls, the test accuracy passes 85% and the 4 replicas end bitwise
// identical, with no tensor copied. With DPGOMLX_FULL=1 (make gomlx-mnist)
// it trains the example's default run instead, 2 epochs of all 60,000
// images, and wants 97%.
func TestTrainsOnTwoByTwo(t *testing.T) {
	args, minAccuracy, limit := "-train 8192 -test 2000 -epochs 1 -log 8", 85.0, 3*time.Minute
	if os.Getenv("DPGOMLX_FULL") != "" {
		args, minAccuracy, limit = "-log 100", 97, 15*time.Minute
	}
	check(t, job(t, []int{2, 2}, args, limit), 4, minAccuracy)
}

// TestTrainsOnOneAndTwoByOne: the short run on 1 process and on 2 nodes ×
// 1 rank.
func TestTrainsOnOneAndTwoByOne(t *testing.T) {
	for _, layout := range [][]int{{1}, {1, 1}} {
		ranks := len(layout)
		t.Run(fmt.Sprint(ranks), func(t *testing.T) {
			check(t, job(t, layout, "-train 8192 -test 2000 -epochs 1 -log 8", 3*time.Minute), ranks, 85)
		})
	}
}
