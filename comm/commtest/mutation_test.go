package commtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// rankSuite is the rank-local form shared by every suite.
type rankSuite func(ctx context.Context, c comm.Communicator, opt Options) error

// worldErrors runs suite on every rank of a reference world with bug b and
// returns the ranks' errors joined (nil when every rank passed).
func worldErrors(size int, b bug, suite rankSuite, opt Options) error {
	comms := newRefWorld(size, b)
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	errs := forEachRank(context.Background(), comms, func(ctx context.Context, c comm.Communicator) error {
		return suite(ctx, c, opt)
	})
	return errors.Join(errs...)
}

// TestMutationsCaught proves that the suites can fail: each known defect,
// built into the reference communicator, must make a suite return an error
// that names a case of the right kind.
func TestMutationsCaught(t *testing.T) {
	quick := small
	quick.Timeout = 500 * time.Millisecond
	only := func(kinds ...comm.Kind) Options {
		o := quick
		o.Kinds = kinds
		return o
	}
	for _, tt := range []struct {
		name    string
		bug     bug
		minSize int // the smallest world where the bug shows
		suite   rankSuite
		opt     Options
		want    string // in the error
	}{
		{"ReduceScatter gives block r+1", bugRSShift, 2, RunRank, only(comm.KindReduceScatter), "ReduceScatter/"},
		{"AllReduce reduces one shard of 2 across nodes", bugShardOnly, 3, RunRank, only(comm.KindAllReduce), "AllReduce/"},
		{"AllReduce drops the last element of an odd count", bugOddDrop, 1, RunRank, only(comm.KindAllReduce), "AllReduce/"},
		{"ExScan gives rank 0 zeros for prod", bugExScanProdZero, 1, RunRank, only(comm.KindExScan), "ExScan/"},
		{"split communicators cannot Send/Recv", bugSplitNoP2P, 1, SplitRank, quick, "SendRecv"},
		{"Gather in reverse order", bugGatherOrder, 2, RunRank, only(comm.KindGather), "Gather/"},
		{"Scan is exclusive", bugScanExclusive, 1, RunRank, only(comm.KindScan), "Scan/"},
		{"Broadcast from rank 0", bugBcastFromZero, 2, RunRank, only(comm.KindBroadcast), "Broadcast/"},
		{"Min and Max skip NaN", bugMinIgnoresNaN, 1, RunRank, only(comm.KindAllReduce), "/nan"},
		{"ranks sum in different orders", bugRankOrderSum, 3, RunRank, only(comm.KindAllReduce), "results differ between ranks"},
		{"tags ignored", bugTagIgnored, 1, P2PRank, quick, "tag"},
		{"AllReduce in a batch drops the last element of an odd count", bugOddDrop, 1, BatchRank, quick, "Batch/"},
		{"a batch's collectives compared without the batch", bugBatchUnmarked, 2, BatchRank, quick, "ErrMismatch"},
		{"PreMulSum scales by the receiver's factor", bugPreMulOwnFactor, 2, RunRank, only(comm.KindAllReduce), "/premulsum/"},
		{"BXor is OR", bugXorAsOr, 2, RunRank, only(comm.KindAllReduce), "/bxor/"},
		// These two wait for timeouts: 2 and 5 ranks are enough.
		{"bad argument not told to the others", bugNoAbandon, 2, BadInputRank, quick, "ErrPeerAbandoned"},
		{"mismatch not reported as one", bugNoMismatch, 2, MismatchRank, quick, "ErrMismatch"},
		{"others hang past their context", bugDeaf, 2, BadInputRank, quick, "hung"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, size := range sizes {
				slow := tt.bug == bugNoAbandon || tt.bug == bugDeaf
				if size < tt.minSize || slow && size != 2 && size != 5 {
					continue
				}
				err := worldErrors(size, tt.bug, tt.suite, tt.opt)
				if err == nil {
					t.Fatalf("size %d: the suite passed a communicator with this bug", size)
				}
				if !strings.Contains(err.Error(), tt.want) {
					t.Errorf("size %d: the error does not mention %q:\n%v", size, tt.want, err)
				}
				if size == tt.minSize {
					t.Logf("size %d: caught:\n%v", size, firstLines(err.Error(), 4))
				}
			}
		})
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, "\n")
}
