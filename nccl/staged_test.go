package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nexar"
)

// stagedWorld is n nccl.Staged over an in-memory nexar world, every rank
// staging through fake device 0, with pieces of pieceBytes.
func stagedWorld(t testing.TB, n, pieceBytes int) ([]comm.Communicator, *nccl.Device) {
	t.Helper()
	dev, err := nccl.NewFake(nccl.FakeOptions{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := nexar.NewMemoryWorld(n, nexar.Options{ProbeAfter: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	comms := make([]comm.Communicator, n)
	for r, h := range hosts {
		st := nccl.NewStaged(h, dev)
		st.SetPieceBytes(pieceBytes)
		comms[r] = st
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms, dev
}

// TestConformanceStaged: a flat world of single-GPU nodes, the whole
// suite on device buffers, with a count large enough that AllReduce,
// Broadcast, Reduce, ReduceScatter and AllGather are staged in pieces.
func TestConformanceStaged(t *testing.T) {
	const piece = 64 << 10 // small pieces: the same paths as 4 MiB ones, at a count the race detector affords
	for _, n := range []int{1, 3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			comms, dev := stagedWorld(t, n, piece)
			o := commtest.Options{Timeout: time.Minute, Memory: dev, Counts: []int{0, 1, 7, 4099}}
			commtest.Run(t, comms, o)
			o.Kinds = []comm.Kind{comm.KindAllReduce, comm.KindBroadcast, comm.KindReduce, comm.KindReduceScatter, comm.KindAllGather}
			o.DTypes = []comm.DType{comm.U8, comm.BF16}
			o.Ops = []comm.ReduceOp{comm.Sum, comm.Max}
			o.Counts = []int{2*piece + 3} // staged in pieces: 3 of u8, 5 of bf16 (of each block for ReduceScatter and AllGather)
			commtest.Run(t, comms, o)
			t.Run("P2P", func(t *testing.T) {
				commtest.RunP2P(t, comms, commtest.Options{Memory: dev, Counts: []int{0, 1, 4099}})
			})
			t.Run("BadInput", func(t *testing.T) { commtest.RunBadInput(t, comms, commtest.Options{Memory: dev}) })
		})
	}
}

// TestStagedPiecesMismatch: ranks whose counts are different multiples of
// the piece size all get a mismatch, not a hang or a wrong result: the
// first piece's count is the number of pieces.
func TestStagedPiecesMismatch(t *testing.T) {
	const piece = 64 << 10
	comms, dev := stagedWorld(t, 3, piece)
	for _, kind := range []comm.Kind{comm.KindAllReduce, comm.KindReduceScatter, comm.KindAllGather} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for r, c := range comms {
			n := 3 * piece // of each block for ReduceScatter and AllGather
			if r == 1 {
				n = 4 * piece
			}
			small, err := dev.Alloc(comm.U8, n)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Free(small)
			all, err := dev.Alloc(comm.U8, 3*n)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Free(all)
			wg.Go(func() {
				switch kind {
				case comm.KindAllReduce:
					errs[r] = c.AllReduce(ctx, small, small, comm.Max)
				case comm.KindReduceScatter:
					errs[r] = c.ReduceScatter(ctx, all, small, comm.Max)
				default:
					errs[r] = c.AllGather(ctx, small, all)
				}
			})
		}
		wg.Wait()
		for r, err := range errs {
			if !errors.Is(err, comm.ErrMismatch) {
				t.Errorf("%v: rank %d: %v, want comm.ErrMismatch", kind, r, err)
			}
		}
	}
}
