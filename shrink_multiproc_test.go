package hiercomm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/hierarchy"
)

// envShrinkHow says how rank 1 leaves TestShrinkWorld's job: "kill" (the
// test sends it SIGKILL), "close" (it closes its World and exits) or
// "cancel" (it cancels a collective and stays: nothing fails).
const envShrinkHow = "HIERCOMM_TEST_SHRINK"

// shrinkRank is the child of TestShrinkWorld: Init, AllReduces with
// rank-distinct data until one fails as envShrinkHow says, then
// World.Shrink and the checks of commtest.ShrunkRank on the survivors'
// World.
func shrinkRank() error {
	how := os.Getenv(envShrinkHow)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := hiercomm.Init(ctx, hiercomm.Options{Detector: testDetector()})
	if err != nil {
		return err
	}
	defer w.Close()
	rank, P := w.Rank(), w.Size()
	survivors, want := []int{0, 2, 3}, comm.ErrPeerFailed
	if how == "cancel" {
		survivors, want = []int{0, 1, 2, 3}, comm.ErrCanceled
	}
	x := make([]float64, 4099)
	for i := 0; ; i++ {
		for j := range x {
			x[j] = float64(rank*len(x) + j)
		}
		cctx, stop := context.WithCancel(ctx)
		if i == 3 && rank == 1 {
			switch how {
			case "close":
				stop()
				return w.Close()
			case "cancel":
				stop()
			}
		}
		err := w.AllReduce(cctx, comm.Host(x), comm.Host(x), comm.Sum)
		stop()
		if i == 2 {
			fmt.Println("shrink-ready")
		}
		if err != nil {
			if !errors.Is(err, want) {
				return fmt.Errorf("AllReduce: %w, want %w", err, want)
			}
			break
		}
		for j := range x {
			if want := float64(P*j + len(x)*P*(P-1)/2); x[j] != want {
				return fmt.Errorf("AllReduce gave %v at %d, want %v", x[j], j, want)
			}
		}
	}
	start := time.Now()
	s, err := w.Shrink(ctx)
	if err != nil {
		return err
	}
	took := time.Since(start)
	defer s.Close()
	if err := commtest.ShrunkRank(ctx, s, rank, survivors); err != nil {
		return err
	}
	sw := s.(*hiercomm.World)
	intra := "-"
	if h, ok := sw.Communicator.(*hierarchy.Comm); ok {
		p, _ := h.Parts()
		intra = fmt.Sprintf("%T", p)
	}
	fmt.Printf("shrunk: rank %d -> %d of %d on %d nodes (%T, intra %s) in %v\n", rank, s.Rank(), s.Size(), sw.Topology().NumNodes(), sw.Communicator, intra, took.Round(time.Millisecond))
	return nil
}

// A rank of a hierarchical World (2 nodes x 2, shared memory within
// them) is killed mid-AllReduce (over TCP and QUIC), closes its World, or
// only cancels a collective: every survivor Shrinks to the same ranks in
// order — three, a hierarchy of a node of 2 and a node of 1, or with
// nothing failed a copy of all four — with shared memory within each node
// again, on which the collectives are exact; no survivor fails or hangs.
// And a World of one node (shared memory alone) that loses a rank.
func TestShrinkWorld(t *testing.T) {
	for _, tc := range []struct {
		network, how string
		layout       []int
	}{{"tcp", "kill", []int{2, 2}}, {"quic", "kill", []int{2, 2}}, {"tcp", "close", []int{2, 2}}, {"tcp", "cancel", []int{2, 2}}, {"tcp", "kill", []int{4}}} {
		t.Run(fmt.Sprintf("%s/%s/%v", tc.network, tc.how, tc.layout), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			out := &lines{marker: "shrink-ready", ch: make(chan struct{}, 8)}
			spec := cluster.LocalSpec{RanksPerNode: tc.layout, Network: tc.network, KeepOthers: true, Env: []string{envShrinkHow + "=" + tc.how}}
			job := startJob(t, ctx, spec, "shrink", out)
			if tc.how == "kill" {
				killWhenReady(t, ctx, job, out, 4, 1)
			}
			for r, err := range job.Errors() {
				if err != nil && !(r == 1 && tc.how == "kill") {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			text := out.String()
			survivors := []int{0, 2, 3}
			if tc.how == "cancel" {
				survivors = []int{0, 1, 2, 3}
			}
			via := "*hierarchy.Comm, intra *shm.Comm"
			if len(tc.layout) == 1 {
				via = "*shm.Comm, intra -"
			}
			for i, r := range survivors {
				want := fmt.Sprintf("shrunk: rank %d -> %d of %d on %d nodes (%s)", r, i, len(survivors), len(tc.layout), via)
				if !strings.Contains(text, want) {
					t.Errorf("no %q", want)
				}
			}
			if t.Failed() {
				t.Fatal(text)
			}
			t.Log(text)
		})
	}
}

// killWhenReady waits until n ranks of job have printed out's marker,
// then kills rank victim (SIGKILL).
func killWhenReady(t *testing.T, ctx context.Context, job *cluster.LocalJob, out *lines, n, victim int) {
	t.Helper()
	for range n {
		select {
		case <-out.ch:
		case <-ctx.Done():
			t.Fatalf("the job never got ready\n%s", tail(out.String(), 60))
		}
	}
	if err := job.Kill(victim); err != nil {
		t.Fatal(err)
	}
}
