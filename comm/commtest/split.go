package commtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// SplitRank checks Split and the communicators it makes; every rank of the
// world must call it. In order:
//
//  1. Split(color rank%2, key -rank): the child holds the ranks of one
//     parity in reverse order; its Rank and Size must say so.
//  2. A set of collective cases (every kind, f32/bf16/i64, sum and max,
//     small counts), the Send/Recv ring and Barrier run on the child while
//     other cases run on the parent, from two goroutines at once (the two
//     sibling children run the same cases at the same time, too).
//  3. Split(NoColor on rank size-1, else color 3, key rank): rank size-1
//     gets (nil, nil); the others a child of size-1 ranks, in the parent's
//     order, that passes a few cases.
//     Then Split(0, key) with keys at the ends of int's range
//     (math.MinInt, math.MaxInt, repeated): the child's ranks follow (key,
//     rank), and it passes a few cases.
//  4. The first child splits again, into pairs; the grandchild passes a few
//     cases, then the child still works.
//  5. Every child closes without error, and the parent still works.
func SplitRank(ctx context.Context, c comm.Communicator, opt Options) error {
	o := opt.withDefaults()
	rank, size := c.Rank(), c.Size()
	r := newReport("Split", rank, o)
	var errs []error
	// cases runs a named case list on cc; its failures are errs.
	cases := func(cc comm.Communicator, prefix string, sub Options) {
		list := buildCases(sub, cc.Size())
		for i := range list {
			list[i].name = prefix + "/" + list[i].name
		}
		if err := runCases(ctx, cc, list, sub, prefix); err != nil {
			errs = append(errs, err)
		}
	}
	few := o
	few.Kinds = []comm.Kind{comm.KindAllReduce, comm.KindScan, comm.KindBarrier, comm.KindSend}
	few.DTypes, few.Ops, few.Counts = []comm.DType{comm.F32}, []comm.ReduceOp{comm.Sum}, []int{1, 7}
	split := func(from comm.Communicator, what string, color, key int) (comm.Communicator, bool) {
		sctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		var child comm.Communicator
		var err error
		if !guard(sctx, r, what, o, func(*report) bool { child, err = from.Split(sctx, color, key); return true }) {
			return nil, false
		}
		if err != nil {
			r.fail(what, "Split(%d, %d): %v", color, key, err)
			if r.cause == nil {
				r.cause = err
			}
			return nil, false
		}
		if child == nil && color != comm.NoColor {
			r.fail(what, "Split(%d, %d) returned no communicator", color, key)
			return nil, false
		}
		if child != nil && color == comm.NoColor {
			r.fail(what, "Split(NoColor, %d) returned a communicator (rank %d of %d); want nil", key, child.Rank(), child.Size())
			return child, false
		}
		return child, true
	}
	shape := func(cc comm.Communicator, what string, wantRank, wantSize int) bool {
		if cc.Rank() != wantRank || cc.Size() != wantSize {
			r.fail(what, "child is rank %d of %d; want rank %d of %d", cc.Rank(), cc.Size(), wantRank, wantSize)
			return false
		}
		return true
	}
	// closeComm closes a child once every member is done with it: Close
	// is local, and a member that closes right after its last Send
	// completed may leave a peer still receiving that message (shm then
	// reports the closed peer instead of delivering it), so the members
	// meet in a Barrier first, as a program would before tearing a group
	// down.
	closeComm := func(cc comm.Communicator, what string) {
		if cc == nil {
			return
		}
		bctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		if err := cc.Barrier(bctx); err != nil {
			r.fail(what, "Barrier before Close: %v", err)
		}
		if err := cc.Close(); err != nil {
			r.fail(what, "Close: %v", err)
		}
	}
	var byParity comm.Communicator
	done := func() error {
		closeComm(byParity, "Split/parity")
		o.Log("commtest Split: rank %d: %d checks failed, %d case lists failed%s", rank, r.failed, len(errs), r.margin())
		all := append([]error{r.err()}, errs...)
		return errors.Join(all...)
	}

	// 1. By parity, reversed.
	byParity, ok := split(c, "Split/parity", rank%2, -rank)
	if !ok {
		return done()
	}
	same := (size - rank%2 + 1) / 2 // ranks of my parity
	higher := (size - 1 - rank) / 2 // ranks of my parity above me
	if !shape(byParity, "Split/parity", higher, same) {
		return done()
	}

	// 2. Child and parent at once.
	childCases := o
	childCases.Kinds = nil
	childCases.DTypes = []comm.DType{comm.F32, comm.BF16, comm.I64}
	childCases.Ops = []comm.ReduceOp{comm.Sum, comm.Max}
	childCases.Counts = []int{0, 1, 7, 100}
	childCases.Timeout = o.Timeout
	childCases = childCases.withDefaults()
	parentCases := childCases
	parentCases.Kinds = []comm.Kind{comm.KindAllReduce, comm.KindAllGather, comm.KindBroadcast, comm.KindSend}
	parentCases.DTypes = []comm.DType{comm.F32, comm.U8}
	parentCases.Counts = []int{5, 64}
	var mu sync.Mutex // guards errs while the two goroutines run
	var wg sync.WaitGroup
	for _, run := range []struct {
		cc     comm.Communicator
		prefix string
		sub    Options
	}{{byParity, fmt.Sprintf("Split/parity(color %d)", rank%2), childCases}, {c, "Split/parent alongside", parentCases}} {
		wg.Go(func() {
			list := buildCases(run.sub, run.cc.Size())
			for i := range list {
				list[i].name = run.prefix + "/" + list[i].name
			}
			if err := runCases(ctx, run.cc, list, run.sub, run.prefix); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return done()
	}

	// 3. NoColor on the last rank.
	color := 3
	if rank == size-1 {
		color = comm.NoColor
	}
	rest, ok := split(c, "Split/nocolor", color, rank)
	if ok && rest != nil && shape(rest, "Split/nocolor", rank, size-1) {
		cases(rest, "Split/nocolor", few)
	}
	closeComm(rest, "Split/nocolor")

	// 3b. Keys at the ends of int's range: the order is by key, then rank,
	// whatever the keys (an order that subtracts keys overflows here).
	extreme := func(q int) int {
		return []int{math.MaxInt, math.MinInt, 0, -5, math.MaxInt, math.MinInt + 1, 1, math.MinInt}[q%8]
	}
	before := 0 // ranks that come before this one
	for q := range size {
		if kq, k := extreme(q), extreme(rank); kq < k || (kq == k && q < rank) {
			before++
		}
	}
	ext, ok := split(c, "Split/extreme keys", 0, extreme(rank))
	if ok && shape(ext, "Split/extreme keys", before, size) {
		cases(ext, "Split/extreme keys", few)
	}
	closeComm(ext, "Split/extreme keys")

	// 4. Nested: the parity child into pairs.
	cr, cs := byParity.Rank(), byParity.Size()
	pair, ok := split(byParity, "Split/nested", cr/2, cr)
	if ok && shape(pair, "Split/nested", cr%2, min(2, cs-cr/2*2)) {
		cases(pair, fmt.Sprintf("Split/nested(pair %d)", cr/2), few)
		cases(byParity, "Split/parity after nested", few)
	}
	closeComm(pair, "Split/nested")

	// 5. The parent after it all.
	cases(c, "Split/parent after", few)
	return done()
}

// RunSplit runs SplitRank on every rank of an in-process world.
func RunSplit(t *testing.T, comms []comm.Communicator, opt Options) {
	t.Helper()
	runRankSuite(t, comms, opt, SplitRank)
}
