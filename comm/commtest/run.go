package commtest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// RunRank runs every case of Options on this rank of c's world and returns
// nil, or an error that lists the failed cases (name, rank, what was wrong:
// the first wrong index with the value got and the one wanted), at most a
// dozen lines. Every rank of the world must call it with equal Options, at
// the same point in its sequence of collectives.
//
// The cases, in order: for each Kind, each DType, each count, each op (for
// the reducing kinds; Avg only on floats, not for Scan and ExScan), each
// root (0, size/2 and size-1 for rooted kinds), out of place and in place
// where comm.Call allows it, plus a NaN variant for float reductions and a
// random-data AllReduce (sum and avg) whose result must be the same bits on
// every rank. A case that fails with wrong data does not stop the run; a
// call that returns an error does, except for an *comm.ArgError and a peer's
// report of one (the communicator is still usable after those), since the
// ranks may no longer agree on where they are.
func RunRank(ctx context.Context, c comm.Communicator, opt Options) error {
	o := opt.withDefaults()
	if err := o.check(); err != nil {
		return err
	}
	return runCases(ctx, c, buildCases(o, c.Size()), o, "RunRank")
}

// runCases runs cases in order on c, each under its own timeout.
func runCases(ctx context.Context, c comm.Communicator, cases []testCase, o Options, suite string) error {
	r := newReport(suite, c.Rank(), o)
	start := time.Now()
	defer func() {
		for i := range cases {
			memo.drop(cases[i].seed)
		}
	}()
	for i := range cases {
		if err := ctx.Err(); err != nil {
			r.stopped = fmt.Sprintf("stopped before %s: %v (%d cases not run)", cases[i].name, err, len(cases)-i)
			break
		}
		r.ran++
		if !runCase(ctx, c, &cases[i], o, r) {
			r.stopped = fmt.Sprintf("stopped after %s (%d cases not run)", cases[i].name, len(cases)-i-1)
			break
		}
	}
	o.Log("commtest %s: rank %d: %d cases, %d failed, %v (the suite's own work: %v)%s",
		suite, c.Rank(), r.ran, r.failed, time.Since(start).Round(time.Millisecond), r.own.Round(time.Millisecond), r.margin())
	return r.err()
}

// runCase runs one case and records what went wrong; it reports false when
// the run must stop.
func runCase(ctx context.Context, c comm.Communicator, tc *testCase, o Options, r *report) bool {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	return guard(ctx, r, tc.name, o, func(r *report) bool { return caseBody(ctx, c, tc, o, r) })
}

func caseBody(ctx context.Context, c comm.Communicator, tc *testCase, o Options, r *report) bool {
	t0 := time.Now()
	p, err := prepare(tc, c.Rank(), c.Size(), o.Memory)
	r.own += time.Since(t0)
	if err != nil {
		r.fail(tc.name, "%v", err)
		return false
	}
	defer p.free()
	if err := p.invoke(ctx, c); err != nil {
		return r.callFailed(tc.name, err)
	}
	t0 = time.Now()
	msg, err := p.verify()
	r.own += time.Since(t0)
	if err != nil {
		r.fail(tc.name, "%v", err)
		return false
	}
	if msg != "" {
		r.fail(tc.name, "%s", msg)
	}
	if tc.v == random {
		msg, err := p.crossCheck(ctx, c)
		if err != nil {
			return r.callFailed(tc.name+" (AllGather of the results)", err)
		}
		if msg != "" {
			r.fail(tc.name, "%s", msg)
		}
	}
	return true
}

// invoke runs the case's call through the blocking methods (Start is the
// NonBlocking suite's); PreMulSum, whose factor no blocking method takes,
// through Start and Wait.
func (p *prepared) invoke(ctx context.Context, c comm.Communicator) error {
	k := p.call
	if k.Kind.Reduces() && k.Op == comm.PreMulSum {
		return c.Start(ctx, k).Wait()
	}
	switch k.Kind {
	case comm.KindAllReduce:
		return c.AllReduce(ctx, k.Send, k.Recv, k.Op)
	case comm.KindBroadcast:
		return c.Broadcast(ctx, k.Send, k.Root)
	case comm.KindReduce:
		return c.Reduce(ctx, k.Send, k.Recv, k.Op, k.Root)
	case comm.KindAllGather:
		return c.AllGather(ctx, k.Send, k.Recv)
	case comm.KindReduceScatter:
		return c.ReduceScatter(ctx, k.Send, k.Recv, k.Op)
	case comm.KindAllToAll:
		return c.AllToAll(ctx, k.Send, k.Recv)
	case comm.KindAllToAllV:
		return c.AllToAllV(ctx, k.Send, k.SendCounts, k.Recv, k.RecvCounts)
	case comm.KindGather:
		return c.Gather(ctx, k.Send, k.Recv, k.Root)
	case comm.KindScatter:
		return c.Scatter(ctx, k.Send, k.Recv, k.Root)
	case comm.KindScan:
		return c.Scan(ctx, k.Send, k.Recv, k.Op)
	case comm.KindExScan:
		return c.ExScan(ctx, k.Send, k.Recv, k.Op)
	case comm.KindBarrier:
		return c.Barrier(ctx)
	case comm.KindSend, comm.KindRecv:
		// Start the Send first: a rank sends before it receives, so a Send
		// that waited for its Recv would deadlock the ring.
		w := c.Start(ctx, comm.Call{Kind: comm.KindSend, Send: k.Send, Peer: k.Peer, Tag: k.Tag})
		left := (p.rank - 1 + p.size) % p.size
		rerr := c.Recv(ctx, k.Recv, left, k.Tag)
		if rerr != nil {
			rerr = fmt.Errorf("receiving from rank %d: %w", left, rerr)
		}
		serr := w.Wait()
		if serr != nil {
			serr = fmt.Errorf("sending to rank %d: %w", k.Peer, serr)
		}
		return errors.Join(rerr, serr)
	}
	return fmt.Errorf("commtest: cannot invoke %v", k.Kind)
}

// crossCheck gathers every rank's result of a random case and reports a
// rank whose bits differ from this rank's. Up to 64 KiB of results it
// gathers the results themselves (to name the first differing index);
// beyond, a 64-bit hash of each.
func (p *prepared) crossCheck(ctx context.Context, c comm.Communicator) (string, error) {
	recv := p.call.Recv
	mine := make([]byte, recv.ByteLen())
	if err := p.mem.Read(mine, recv); err != nil {
		return "", fmt.Errorf("Memory.Read: %w", err)
	}
	what := "result"
	if len(mine)*p.size > 64<<10 {
		h := fnv.New64a()
		h.Write(mine)
		mine, what = h.Sum(nil), "result's hash"
	}
	a := &arena{mem: p.mem}
	defer a.free()
	send, err := a.buffer(comm.U8, mine)
	if err != nil {
		return "", err
	}
	all, err := a.zeros(comm.U8, len(mine)*p.size)
	if err != nil {
		return "", err
	}
	if err := c.AllGather(ctx, send, all); err != nil {
		return "", err
	}
	got, err := a.read(all)
	if err != nil {
		return "", err
	}
	e := p.src.e
	if what != "result" {
		e = elemOf(comm.U64)
	}
	for q := range p.size {
		if msg := compare(e, got[q*len(mine):(q+1)*len(mine)], mine); msg != "" {
			return fmt.Sprintf("results differ between ranks: rank %d's %s vs this rank's: %s", q, what, msg), nil
		}
	}
	return "", nil
}
