package commtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// P2PRank checks Send and Recv on this rank; every rank of the world must
// call it. The steps:
//
//   - tags: four messages of different sizes to the right neighbour, with
//     different tags, received in the reverse order of their sending;
//   - order: eight messages with one tag, received in the order sent
//     (non-overtaking);
//   - self: messages to oneself, on two tags;
//   - recv-first: a Recv started before the matching Send;
//   - sizes: 0, 1 and a large message in both directions around the ring;
//   - all-pairs: every rank sends to every rank, received in reverse order.
//
// Sends are started with Start before the receives are waited for, so an
// implementation whose Send waits for its Recv passes too, but one whose
// Start blocks does not.
func P2PRank(ctx context.Context, c comm.Communicator, opt Options) error {
	o := opt.withDefaults()
	rank, size := c.Rank(), c.Size()
	right, left := (rank+1)%size, (rank-1+size)%size
	large := slices.Max(append(slices.Clone(o.Counts), 1<<16+3))
	dt := comm.F32

	// exchange starts sends (peer, tag, n, name) and then receives recvs in
	// the given order, checking each message's content.
	type msg struct {
		peer, tag, n int
		name         string
	}
	exchange := func(ctx context.Context, a *arena, sends, recvs []msg) (string, error) {
		var works []*comm.Work
		for _, m := range sends {
			b, err := a.buffer(dt, message(m.name, dt, rank, size, m.n))
			if err != nil {
				return "", err
			}
			works = append(works, c.Start(ctx, comm.Call{Kind: comm.KindSend, Send: b, Peer: m.peer, Tag: m.tag}))
		}
		var problem string
		var errs []error
		for _, m := range recvs {
			init := make([]byte, m.n*dt.Size())
			garbage(init, uint64(m.tag)^0x5eed)
			b, err := a.buffer(dt, init)
			if err != nil {
				return "", err
			}
			if err := c.Recv(ctx, b, m.peer, m.tag); err != nil {
				errs = append(errs, fmt.Errorf("Recv(peer %d, tag %d): %w", m.peer, m.tag, err))
				break
			}
			got, err := a.read(b)
			if err != nil {
				return "", err
			}
			if d := compare(elemOf(dt), got, message(m.name, dt, m.peer, size, m.n)); d != "" && problem == "" {
				problem = fmt.Sprintf("message %q from rank %d (tag %d, %d elements): %s", m.name, m.peer, m.tag, m.n, d)
			}
		}
		for i, w := range works {
			if err := w.Wait(); err != nil {
				errs = append(errs, fmt.Errorf("Send(peer %d, tag %d): %w", sends[i].peer, sends[i].tag, err))
			}
		}
		return problem, errors.Join(errs...)
	}

	var steps []step
	add := func(name string, sends, recvs func(self int) []msg) {
		steps = append(steps, step{name: "P2P/" + name, run: func(ctx context.Context, a *arena) (string, error) {
			return exchange(ctx, a, sends(rank), recvs(rank))
		}})
	}
	// A message's name says who sent it to whom, so the receiver can
	// rebuild it with the sender's rank.
	name := func(step string, from, to, k int) string { return fmt.Sprintf("%s %d→%d #%d", step, from, to, k) }

	tags := []int{5, 0, 1 << 20, 77}
	add("tags", func(r int) []msg {
		var m []msg
		for k, tag := range tags {
			m = append(m, msg{right, tag, 3 + 11*k, name("tags", r, right, k)})
		}
		return m
	}, func(r int) []msg {
		var m []msg
		for k := len(tags) - 1; k >= 0; k-- {
			m = append(m, msg{left, tags[k], 3 + 11*k, name("tags", left, r, k)})
		}
		return m
	})
	order := func(to, from int) ([]msg, []msg) {
		var s, rv []msg
		for k := range 8 {
			s = append(s, msg{to, 9, 1 + k%3, name("order", rank, to, k)})
			rv = append(rv, msg{from, 9, 1 + k%3, name("order", from, rank, k)})
		}
		return s, rv
	}
	add("order", func(int) []msg { s, _ := order(right, left); return s }, func(int) []msg { _, r := order(right, left); return r })
	add("self", func(r int) []msg {
		return []msg{{r, 1, 5, name("self", r, r, 0)}, {r, 2, 0, name("self", r, r, 1)}, {r, 1, 6, name("self", r, r, 2)}}
	}, func(r int) []msg {
		return []msg{{r, 2, 0, name("self", r, r, 1)}, {r, 1, 5, name("self", r, r, 0)}, {r, 1, 6, name("self", r, r, 2)}}
	})
	steps = append(steps, step{name: "P2P/recv-first", run: func(ctx context.Context, a *arena) (string, error) {
		const n = 257
		rb, err := a.zeros(dt, n)
		if err != nil {
			return "", err
		}
		rw := c.Start(ctx, comm.Call{Kind: comm.KindRecv, Recv: rb, Peer: left, Tag: 3})
		sb, err := a.buffer(dt, message("recv-first", dt, rank, size, n))
		if err != nil {
			return "", err
		}
		serr := c.Send(ctx, sb, right, 3)
		if err := errors.Join(rw.Wait(), serr); err != nil {
			return "", err
		}
		got, err := a.read(rb)
		if err != nil {
			return "", err
		}
		if d := compare(elemOf(dt), got, message("recv-first", dt, left, size, n)); d != "" {
			return "message from rank " + fmt.Sprint(left) + ": " + d, nil
		}
		return "", nil
	}})
	for _, n := range []int{0, 1, large} {
		add(fmt.Sprintf("sizes/n=%d", n), func(r int) []msg {
			return []msg{{right, 100, n, name("size", r, right, n)}, {left, 101, n, name("size", r, left, n)}}
		}, func(r int) []msg {
			return []msg{{right, 101, n, name("size", right, r, n)}, {left, 100, n, name("size", left, r, n)}}
		})
	}
	add("all-pairs", func(r int) []msg {
		var m []msg
		for q := range size {
			m = append(m, msg{q, 7, 1 + (r+q)%5, name("pairs", r, q, 0)})
		}
		return m
	}, func(r int) []msg {
		var m []msg
		for q := size - 1; q >= 0; q-- {
			m = append(m, msg{q, 7, 1 + (r+q)%5, name("pairs", q, r, 0)})
		}
		return m
	})
	return runSteps(ctx, c, steps, o, "P2P")
}

// RunP2P runs P2PRank on every rank of an in-process world.
func RunP2P(t *testing.T, comms []comm.Communicator, opt Options) {
	t.Helper()
	runRankSuite(t, comms, opt, P2PRank)
}

// runRankSuite runs a rank-local suite on every rank of an in-process world
// and fails t with each rank's error.
func runRankSuite(t *testing.T, comms []comm.Communicator, opt Options, suite func(context.Context, comm.Communicator, Options) error) {
	t.Helper()
	checkWorld(t, comms)
	if opt.Log == nil {
		opt.Log = t.Logf
	}
	runWorld(t, comms, func(ctx context.Context, c comm.Communicator) error { return suite(ctx, c, opt) })
}

// Exchange swaps out for in with peer n times, as the bench's sendrecv
// does: each time it Starts a Send of out and a Recv into in (tag 0), and
// waits for both. The peer calls it too, with this rank as its peer. The
// latency benchmarks of the transports time it.
func Exchange(ctx context.Context, c comm.Communicator, peer, n int, out, in []byte) error {
	for range n {
		s := c.Start(ctx, comm.Call{Kind: comm.KindSend, Send: comm.Host(out), Peer: peer})
		r := c.Start(ctx, comm.Call{Kind: comm.KindRecv, Recv: comm.Host(in), Peer: peer})
		if err := errors.Join(s.Wait(), r.Wait()); err != nil {
			return err
		}
	}
	return nil
}
