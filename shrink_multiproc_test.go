package hiercomm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/hierarchy"
)

// shrinkRank is the child of TestShrinkAfterAKill: Init, AllReduces with
// rank-distinct data until rank 1 is killed, then World.Shrink and the
// checks of commtest.ShrunkRank on the survivors' World.
func shrinkRank() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := hiercomm.Init(ctx, hiercomm.Options{Detector: testDetector()})
	if err != nil {
		return err
	}
	defer w.Close()
	rank, P := w.Rank(), w.Size()
	x := make([]float64, 4099)
	for i := 0; ; i++ {
		for j := range x {
			x[j] = float64(rank*len(x) + j)
		}
		err := w.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum)
		if i == 2 {
			fmt.Println("shrink-ready")
		}
		if err != nil {
			if !errors.Is(err, comm.ErrPeerFailed) {
				return fmt.Errorf("AllReduce: %w, want ErrPeerFailed", err)
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
	if err := commtest.ShrunkRank(ctx, s, rank, []int{0, 2, 3}); err != nil {
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
// them) is killed mid-AllReduce: every survivor Shrinks to the same three
// ranks in order, a hierarchy of a node of 2 and a node of 1 with shared
// memory within each again, on which the collectives are exact; no
// survivor fails or hangs.
func TestShrinkAfterAKill(t *testing.T) {
	for _, network := range []string{"tcp", "quic"} {
		t.Run(network, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			out := &lines{marker: "shrink-ready", ch: make(chan struct{}, 8)}
			job := startJob(t, ctx, cluster.LocalSpec{RanksPerNode: []int{2, 2}, Network: network, KeepOthers: true}, "shrink", out)
			killWhenReady(t, ctx, job, out, 4, 1)
			for r, err := range job.Errors() {
				if r != 1 && err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			text := out.String()
			for i, r := range []int{0, 2, 3} {
				want := fmt.Sprintf("shrunk: rank %d -> %d of 3 on 2 nodes (*hierarchy.Comm, intra *shm.Comm)", r, i)
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
