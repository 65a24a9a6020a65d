package nexar_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/nexar"
)

// worldSizes are the conformance suite's world sizes: one rank, a pair,
// odd sizes, a power of two and sizes that are not.
var worldSizes = []int{1, 2, 3, 4, 5, 8}

func asComms(cs []*nexar.Comm) []comm.Communicator {
	out := make([]comm.Communicator, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out
}

// conformanceOptions keeps the full count list, trimming the large case to
// the suite's representative subset (and a smaller large count under -race,
// where the reference and the schedules run ~10× slower).
func conformanceOptions() commtest.Options {
	o := commtest.Options{Timeout: 2 * time.Minute}
	if raceEnabled {
		o.Counts = []int{0, 1, 7, 65537}
	}
	return o
}

func TestConformanceMemory(t *testing.T) {
	for _, n := range worldSizes {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			// Small segments so that even modest counts cross many
			// pipeline segments.
			cs, err := nexar.NewMemoryWorld(n, nexar.Options{SegmentBytes: 4096, ProbeAfter: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer nexar.CloseAll(cs)
			commtest.Run(t, asComms(cs), conformanceOptions())
		})
	}
}

// TestConformanceNet runs the suite over QUIC alone (quic-only), over
// the default network's two lanes (quic), where the counts put frames on
// both sides of netmesh.BulkFrameMin (65537 elements: pieces from
// BulkFrameMin up take the TLS lane, smaller ones and the control frames
// QUIC), and over plain TCP, where the same counts put pieces on both
// sides of the size from which a frame lands straight in the receive
// buffer (landing.go: 32 KiB).
func TestConformanceNet(t *testing.T) {
	for _, network := range []string{"quic-only", "quic", "tcp"} {
		counts := []int{0, 1, 7, 4099}
		if network != "quic-only" {
			counts = append(counts, 65537)
		}
		for _, n := range []int{2, 3, 4} {
			t.Run(fmt.Sprintf("%s/ranks=%d", network, n), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				cs, err := nexar.NewLocalWorld(ctx, n, network, nexar.Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer nexar.CloseAll(cs)
				commtest.Run(t, asComms(cs), commtest.Options{Counts: counts})
			})
		}
	}
}

func TestSuitesMemory(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			mk := func() []comm.Communicator {
				cs, err := nexar.NewMemoryWorld(n, nexar.Options{SegmentBytes: 4096, ProbeAfter: 50 * time.Millisecond, Timeout: 30 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { nexar.CloseAll(cs) })
				return asComms(cs)
			}
			opt := commtest.Options{Timeout: 30 * time.Second}
			t.Run("p2p", func(t *testing.T) { commtest.RunP2P(t, mk(), opt) })
			t.Run("nonblocking", func(t *testing.T) { commtest.RunNonBlocking(t, mk(), opt) })
			t.Run("split", func(t *testing.T) { commtest.RunSplit(t, mk(), opt) })
			t.Run("badinput", func(t *testing.T) { commtest.RunBadInput(t, mk(), opt) })
		})
	}
}

// TestMismatchSuiteMemory runs the mismatch suite and the fault suite
// (commtest.RunFaults: a rank canceled, past its deadline, closed,
// aborted or late, each on a Split child), each on a world of its own.
func TestMismatchSuiteMemory(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			mk := func() []comm.Communicator {
				cs, err := nexar.NewMemoryWorld(n, nexar.Options{ProbeAfter: 50 * time.Millisecond, Timeout: 30 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { nexar.CloseAll(cs) })
				return asComms(cs)
			}
			t.Run("mismatch", func(t *testing.T) { commtest.RunMismatch(t, mk(), commtest.Options{Timeout: 30 * time.Second}) })
			t.Run("faults", func(t *testing.T) { commtest.RunFaults(t, mk(), commtest.Options{Timeout: 5 * time.Second}) })
		})
	}
}

// TestMismatchMatrixMemory: every ordered pair of kinds, one rank calling
// the other (commtest.MismatchMatrixRank), each a mismatch at collective
// #2 on every rank, also on a rank whose part only sent and that meets it
// in its next call.
func TestMismatchMatrixMemory(t *testing.T) {
	for _, n := range []int{3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			cs, err := nexar.NewMemoryWorld(n, nexar.Options{Timeout: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer nexar.CloseAll(cs)
			commtest.RunMismatchMatrix(t, asComms(cs), commtest.Options{Timeout: 30 * time.Second})
		})
	}
}

func TestFusedMemory(t *testing.T) {
	for _, n := range []int{1, 3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			cs, err := nexar.NewMemoryWorld(n, nexar.Options{Timeout: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer nexar.CloseAll(cs)
			commtest.RunFused(t, asComms(cs), commtest.Options{Timeout: 30 * time.Second})
		})
	}
}

// TestFaultSuiteNet runs the fault suite over QUIC and TCP on loopback.
func TestFaultSuiteNet(t *testing.T) {
	for _, network := range []string{"quic", "tcp"} {
		t.Run(network, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cs, err := nexar.NewLocalWorld(ctx, 3, network, nexar.Options{ProbeAfter: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer nexar.CloseAll(cs)
			commtest.RunFaults(t, asComms(cs), commtest.Options{Timeout: 5 * time.Second})
		})
	}
}
