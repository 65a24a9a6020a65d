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
	"github.com/hiercomm/hiercomm/nccl/ncclfake"
	"github.com/hiercomm/hiercomm/nexar"
)

// stagedWorld is n nccl.Staged over an in-memory nexar world, every rank
// staging through fake device 0, with pieces of pieceBytes.
func stagedWorld(t testing.TB, n, pieceBytes int) ([]comm.Communicator, *nccl.Device) {
	t.Helper()
	dev, err := ncclfake.New(ncclfake.Options{}).Device(0)
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
			t.Run("Faults", func(t *testing.T) {
				commtest.RunFaults(t, comms, commtest.Options{Timeout: 5 * time.Second, Memory: dev})
			})
		})
	}
}

// TestStagedTinyPieces: a piece size under two elements still gives every
// piece an element (ReduceScatter's and AllGather's in-place forms read
// their own block, which a piece of no elements once ran whole after
// earlier pieces had written it).
func TestStagedTinyPieces(t *testing.T) {
	comms, dev := stagedWorld(t, 3, 1)
	commtest.Run(t, comms, commtest.Options{Timeout: time.Minute, Memory: dev, Counts: []int{5, 33},
		Kinds:  []comm.Kind{comm.KindAllReduce, comm.KindReduceScatter, comm.KindAllGather},
		DTypes: []comm.DType{comm.I32}, Ops: []comm.ReduceOp{comm.Sum}})
}

// TestStagedPiecesMismatch: ranks whose counts differ all get a mismatch,
// not a hang or a wrong result, for each kind that is cut into pieces
// (each on a world of its own: a mismatch aborts the world). The counts:
// different multiples of the piece size; and a count too small to cut
// that equals the number of a peer's pieces, whose first piece's count
// it would match but for the whole call's signature every piece carries.
func TestStagedPiecesMismatch(t *testing.T) {
	const piece = 64 << 10
	for _, kind := range []comm.Kind{comm.KindAllReduce, comm.KindReduceScatter, comm.KindAllGather} {
		for _, counts := range [][3]int{{3 * piece, 4 * piece, 3 * piece}, {4, 3*piece + 1, 3*piece + 1}} {
			t.Run(fmt.Sprintf("%v/%d", kind, counts), func(t *testing.T) {
				comms, dev := stagedWorld(t, 3, piece)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				errs := make([]error, 3)
				var wg sync.WaitGroup
				for r, c := range comms {
					n := counts[r] // of each block for ReduceScatter and AllGather
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
						t.Errorf("rank %d (count %d): %v, want comm.ErrMismatch", r, counts[r], err)
					}
				}
			})
		}
	}
}
