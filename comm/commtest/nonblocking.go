package commtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// NonBlockingRank checks that operations can be in flight together: it
// starts a mix of collectives on different buffers (and a Send/Recv pair)
// with Start, one after another without waiting, then waits for them in the
// reverse order and checks every result; then it does the same with sixteen
// small AllReduces. Every rank of the world must call it.
//
// It also checks the Work contract: Done is closed and Test reports the
// same error after Wait.
func NonBlockingRank(ctx context.Context, c comm.Communicator, opt Options) error {
	o := opt.withDefaults()
	mixed := mixedCases(c.Size())
	var many []testCase
	for k := range 16 {
		many = append(many, newCase(comm.KindAllReduce, comm.I64, comm.Sum, 5+k, 0, plain))
	}
	steps := []step{
		{name: "NonBlocking/mixed", run: func(ctx context.Context, a *arena) (string, error) { return inFlight(ctx, c, mixed, o) }},
		{name: "NonBlocking/many", run: func(ctx context.Context, a *arena) (string, error) { return inFlight(ctx, c, many, o) }},
	}
	return runSteps(ctx, c, steps, o, "NonBlocking")
}

// mixedCases are collectives of every shape on different buffers, and a
// Send/Recv ring, for operations in flight together (NonBlockingRank,
// BatchRank).
func mixedCases(size int) []testCase {
	last := size - 1
	return []testCase{
		newCase(comm.KindAllReduce, comm.F32, comm.Sum, 1000, 0, plain),
		newCase(comm.KindAllGather, comm.U8, 0, 33, 0, plain),
		newCase(comm.KindBroadcast, comm.I64, 0, 100, last, plain),
		newCase(comm.KindSend, comm.F32, 0, 20, 0, plain),
		newCase(comm.KindReduceScatter, comm.BF16, comm.Max, 17, 0, plain),
		newCase(comm.KindAllReduce, comm.I32, comm.Prod, 7, 0, inPlace),
		newCase(comm.KindBarrier, 0, 0, 0, 0, plain),
		newCase(comm.KindScan, comm.F64, comm.Sum, 9, 0, plain),
		newCase(comm.KindAllToAllV, comm.F16, 0, 5, 0, plain),
		newCase(comm.KindReduce, comm.F32, comm.Min, 50, 0, plain),
		newCase(comm.KindGather, comm.U32, 0, 3, last, plain),
		newCase(comm.KindExScan, comm.I8, comm.Max, 6, 0, plain),
	}
}

// inFlight starts every case, waits for them in reverse order, and checks
// them all.
func inFlight(ctx context.Context, c comm.Communicator, cases []testCase, o Options) (string, error) {
	rank, size := c.Rank(), c.Size()
	var ps []*prepared
	defer func() {
		for _, p := range ps {
			p.free()
		}
	}()
	type started struct {
		w    *comm.Work
		what string
	}
	var works []started
	for i := range cases {
		p, err := prepare(&cases[i], rank, size, o.Memory)
		if err != nil {
			return "", err
		}
		ps = append(ps, p)
		k := p.call
		if k.Kind == comm.KindSend {
			left := (rank - 1 + size) % size
			works = append(works,
				started{c.Start(ctx, comm.Call{Kind: comm.KindRecv, Recv: k.Recv, Peer: left, Tag: k.Tag}), cases[i].name + " (Recv)"},
				started{c.Start(ctx, comm.Call{Kind: comm.KindSend, Send: k.Send, Peer: k.Peer, Tag: k.Tag}), cases[i].name + " (Send)"})
			continue
		}
		works = append(works, started{c.Start(ctx, k), cases[i].name})
	}
	var errs []error
	for _, s := range slices.Backward(works) {
		err := s.w.Wait()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.what, err))
		}
		select {
		case <-s.w.Done():
		default:
			errs = append(errs, fmt.Errorf("%s: Work.Done is not closed after Wait returned", s.what))
		}
		if done, terr := s.w.Test(); !done || terr != err {
			errs = append(errs, fmt.Errorf("%s: Work.Test after Wait = (%v, %v), want (true, %v)", s.what, done, terr, err))
		}
	}
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	for _, p := range ps {
		msg, err := p.verify()
		if err != nil {
			return "", err
		}
		if msg != "" {
			return p.tc.name + ": " + msg, nil
		}
	}
	return "", nil
}

// RunNonBlocking runs NonBlockingRank on every rank of an in-process world.
func RunNonBlocking(t *testing.T, comms []comm.Communicator, opt Options) {
	t.Helper()
	runRankSuite(t, comms, opt, NonBlockingRank)
}
