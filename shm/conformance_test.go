//go:build linux

package shm

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
)

// worldSizes are the conformance suite's world sizes: one rank, a pair,
// odd sizes, a power of two and sizes that are not.
var worldSizes = []int{1, 2, 3, 4, 5, 8}

var namespaces atomic.Int64

// testNamespace is a namespace no other test (or test process) uses.
func testNamespace() string {
	return fmt.Sprintf("test-%d-%d", os.Getpid(), namespaces.Add(1))
}

// localWorld makes an in-process world of n ranks that the test closes at
// its end, checking that no segment file of it is left in /dev/shm.
func localWorld(t testing.TB, n int, cfg Config) []*Comm {
	t.Helper()
	return localWorldIn(t, testNamespace(), n, cfg)
}

func localWorldIn(t testing.TB, ns string, n int, cfg Config) []*Comm {
	t.Helper()
	cs, err := NewLocal(context.Background(), ns, n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := CloseAll(cs); err != nil {
			t.Errorf("CloseAll: %v", err)
		}
		noSegments(t, ns)
	})
	return cs
}

// noSegments fails t if namespace ns has files in /dev/shm.
func noSegments(t testing.TB, ns string) {
	t.Helper()
	left, err := Segments(ns)
	if err != nil {
		t.Error(err)
	}
	if len(left) > 0 {
		t.Errorf("segments left in /dev/shm: %v", left)
	}
}

func asComms(cs []*Comm) []comm.Communicator {
	out := make([]comm.Communicator, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out
}

// conformanceOptions keeps the suite's counts but under the race detector,
// where a smaller large count (4099, still several chunks of the small
// slots) keeps the package's tests within a couple of minutes.
func conformanceOptions() commtest.Options {
	o := commtest.Options{Timeout: 2 * time.Minute}
	if raceDetector {
		o.Counts = []int{0, 1, 7, 4099}
	}
	return o
}

// smallSlots makes large counts cross many chunks, and pieces of blocks
// in the AllToAll and ReduceScatter schedules.
var smallSlots = Config{SlotBytes: minSlotBytes, Timeout: 2 * time.Minute}

func TestConformance(t *testing.T) {
	for _, n := range worldSizes {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			commtest.Run(t, asComms(localWorld(t, n, smallSlots)), conformanceOptions())
		})
	}
}

// The default slots: large messages in few chunks, the path of real jobs.
func TestConformanceDefaultSlots(t *testing.T) {
	sizes := []int{2, 4}
	if raceDetector {
		sizes = []int{3}
	}
	for _, n := range sizes {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			commtest.Run(t, asComms(localWorld(t, n, Config{})), conformanceOptions())
		})
	}
}

func TestSuites(t *testing.T) {
	sizes := worldSizes
	if raceDetector {
		sizes = []int{1, 2, 3, 5}
	}
	for _, n := range sizes {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			cfg := Config{SlotBytes: 16 << 10, Timeout: 30 * time.Second}
			opt := commtest.Options{Timeout: 30 * time.Second}
			t.Run("p2p", func(t *testing.T) { commtest.RunP2P(t, asComms(localWorld(t, n, cfg)), opt) })
			t.Run("nonblocking", func(t *testing.T) { commtest.RunNonBlocking(t, asComms(localWorld(t, n, cfg)), opt) })
			t.Run("split", func(t *testing.T) { commtest.RunSplit(t, asComms(localWorld(t, n, cfg)), opt) })
			t.Run("badinput", func(t *testing.T) { commtest.RunBadInput(t, asComms(localWorld(t, n, cfg)), opt) })
			t.Run("fused", func(t *testing.T) { commtest.RunFused(t, asComms(localWorld(t, n, cfg)), opt) })
			if n >= 2 {
				t.Run("mismatch", func(t *testing.T) { commtest.RunMismatch(t, asComms(localWorld(t, n, cfg)), opt) })
				t.Run("matrix", func(t *testing.T) { commtest.RunMismatchMatrix(t, asComms(localWorld(t, n, cfg)), opt) })
				t.Run("faults", func(t *testing.T) { commtest.RunFaults(t, asComms(localWorld(t, n, cfg)), faultOptions) })
			}
		})
	}
}

// faultOptions run commtest's fault suite, with the cases shared memory
// does not pass yet skipped, each with why.
var faultOptions = commtest.Options{Timeout: 5 * time.Second}
