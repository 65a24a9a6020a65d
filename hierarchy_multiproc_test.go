package hiercomm_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/hierarchy"
)

// conformance is the child of TestConformanceMultiProcessHierarchy: Init
// (a hierarchical World: shm or nexar within nodes, QUIC between), then
// every suite. The large paths are forced at small counts so that they run
// in many chunks.
func conformance() error {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	w, err := hiercomm.Init(ctx, hiercomm.Options{Hierarchy: hierarchy.Config{SmallBytes: 64, ChunkBytes: 1024}})
	if err != nil {
		return err
	}
	defer w.Close()
	h, ok := w.Communicator.(*hierarchy.Comm)
	if !ok {
		return fmt.Errorf("rank %d runs on %T, want the hierarchy", w.Rank(), w.Communicator)
	}
	// The route the launch asked for, where it asked for one (unset: the
	// hosts' crowding decides).
	if env := os.Getenv(launchenv.EnvNodeP2P); env == "world" || env == "intra" {
		if via := env == "world"; h.NodeP2PViaWorld() != via || strings.Contains(h.String(), "via the world part") != via {
			return fmt.Errorf("rank %d: %s, with %s=%q", w.Rank(), h, launchenv.EnvNodeP2P, env)
		}
	}
	opt := commtest.Options{Timeout: time.Minute, Counts: []int{0, 1, 7, 4099}}
	if os.Getenv("HIERCOMM_TEST_FULL") == "1" {
		opt.Counts = []int{0, 1, 7, 4099, 65537}
	}
	for _, s := range []struct {
		name string
		run  func(context.Context, comm.Communicator, commtest.Options) error
	}{
		{"conformance", commtest.RunRank},
		{"p2p", commtest.P2PRank},
		{"nonblocking", commtest.NonBlockingRank},
		{"split", commtest.SplitRank},
		{"badinput", commtest.BadInputRank},
		{"fused", commtest.FusedRank},
		{"mismatch", commtest.MismatchRank},
	} {
		if err := s.run(ctx, w, opt); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	fmt.Printf("conformance ok: rank %d\n", w.Rank())
	return nil
}

// TestConformanceMultiProcessHierarchy runs every suite on the
// hierarchical communicator of real processes on emulated nodes: 2×2 with
// shared memory within nodes, 2+3 (heterogeneous), 2×2 cyclic placement,
// 2×2 with nexar within nodes, and 2×2 with node-mates' Send and Recv
// through the world part (HIERCOMM_NODE_P2P=world). The first keeps them
// in shared memory (HIERCOMM_NODE_P2P=intra), which the others, on a host
// with fewer cores than processes, do not.
func TestConformanceMultiProcessHierarchy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		layout    []int
		placement string
		env       []string
	}{
		{"2x2 shm", []int{2, 2}, "block", []string{launchenv.EnvNodeP2P + "=intra"}},
		{"2+3 shm", []int{2, 3}, "block", nil},
		{"2x2 cyclic shm", []int{2, 2}, "cyclic", nil},
		{"2x2 nexar", []int{2, 2}, "block", []string{launchenv.EnvIntra + "=nexar"}},
		{"2x2 shm, node-mates' Send and Recv via the world", []int{2, 2}, "block", []string{launchenv.EnvNodeP2P + "=world"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			out := &lines{marker: "conformance ok", ch: make(chan struct{}, 1)}
			job := startJob(t, ctx, cluster.LocalSpec{RanksPerNode: tc.layout, Placement: tc.placement, Style: "slurm", Network: "tcp", Env: tc.env}, "conformance", out)
			if err := job.Wait(); err != nil {
				t.Fatalf("%v\n%s", err, tail(out.String(), 60))
			}
			n := 0
			for _, g := range tc.layout {
				n += g
			}
			if out.count != n {
				t.Fatalf("%d of %d ranks passed\n%s", out.count, n, tail(out.String(), 60))
			}
		})
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	ls := strings.Split(s, "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}
