package hierarchy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/hierarchy"
)

// The phases of a hierarchical AllReduce sum whatever the op (Avg is
// divided once at the end), so ranks that call Avg and Sum agree on every
// phase: only the user's call, which every phase carries (tier.Phase.Outer),
// tells them apart. Every rank must get a mismatch in its own call's
// terms, none a result, and none may wait in the next call.
func TestUserMismatchSeenThroughThePhases(t *testing.T) {
	for _, intra := range []string{"shm", "nexar"} {
		for _, n := range []int{17, 1 << 18} { // the latency path and the 2D one
			t.Run(fmt.Sprintf("%s/%d", intra, n), func(t *testing.T) {
				cs := build(t, layout{name: "2x2", perNode: []int{2, 2}}, intra, hierarchy.Config{})
				errs := each(cs, func(r int, c comm.Communicator) error {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					op := comm.Avg
					if r == 3 {
						op = comm.Sum
					}
					x := make([]float32, n)
					for i := range x {
						x[i] = 1
					}
					err := c.AllReduce(ctx, comm.Host(x), comm.Host(x), op)
					if err == nil {
						return fmt.Errorf("AllReduce(%v) returned nil (x[0] = %v)", op, x[0])
					}
					if !errors.Is(err, comm.ErrMismatch) {
						return fmt.Errorf("AllReduce(%v): %v, want a mismatch", op, err)
					}
					if r == 3 || r == 0 {
						t.Logf("rank %d: %v", r, err)
					}
					var me *comm.MismatchError
					if !errors.As(err, &me) || me.Local.Op != op || me.Local.Count != int64(n) || me.Local.Kind != comm.KindAllReduce {
						return fmt.Errorf("AllReduce(%v): %v: want a *comm.MismatchError naming this rank's own call", op, err)
					}
					return nextFailsAtOnce(ctx, c)
				})
				for r, err := range errs {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
				}
			})
		}
	}
}

// A count mismatch is reported as the user's call, not as the phase that
// saw it.
func TestUserCountMismatchInUserTerms(t *testing.T) {
	cs := build(t, layout{name: "2x2", perNode: []int{2, 2}}, "shm", hierarchy.Config{})
	n := 1 << 18
	errs := each(cs, func(r int, c comm.Communicator) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m := n
		if r == 1 {
			m = n - 1
		}
		x := make([]float32, m)
		return c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum)
	})
	for r, err := range errs {
		if !errors.Is(err, comm.ErrMismatch) {
			t.Errorf("rank %d: %v, want a mismatch", r, err)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "ReduceScatter(") {
			t.Errorf("rank %d: %v: names a phase (ReduceScatter), not the user's AllReduce", r, msg)
		}
	}
}

// each runs f on every rank at once.
func each(cs []comm.Communicator, f func(r int, c comm.Communicator) error) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() { errs[r] = f(r, c) })
	}
	wg.Wait()
	return errs
}

// AllToAllV counts that disagree between two ranks (each rank's buffers
// match its own counts): a mismatch on every rank, and no rank waits in
// the next call.
func TestAllToAllVCountMismatch(t *testing.T) {
	for _, tc := range []struct {
		intra string
		to    int // rank 0 sends rank to one element more than it expects
	}{{"shm", 1}, {"nexar", 1}, {"shm", 2}, {"nexar", 3}} {
		intra, to := tc.intra, tc.to
		t.Run(fmt.Sprintf("%s/0to%d", intra, to), func(t *testing.T) {
			cs := build(t, layout{name: "2x2", perNode: []int{2, 2}}, intra, hierarchy.Config{})
			errs := each(cs, func(r int, c comm.Communicator) error {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				send, recv := []int{2, 2, 2, 2}, []int{2, 2, 2, 2}
				if r == 0 {
					send[to] = 3 // rank to expects 2
				}
				sb, rb := make([]float32, 9), make([]float32, 8)
				if r != 0 {
					sb = sb[:8]
				}
				err := c.AllToAllV(ctx, comm.Host(sb), send, comm.Host(rb), recv)
				if r == to && !errors.Is(err, comm.ErrMismatch) {
					return fmt.Errorf("AllToAllV: %v, want a mismatch", err)
				}
				if err != nil && !errors.Is(err, comm.ErrMismatch) {
					return fmt.Errorf("AllToAllV: %v, want a mismatch or (a rank whose part was whole) nil", err)
				}
				start := time.Now()
				err = c.Barrier(ctx)
				if !errors.Is(err, comm.ErrMismatch) || time.Since(start) > 5*time.Second {
					return fmt.Errorf("Barrier after the mismatch: %v after %v, want the mismatch at once", err, time.Since(start))
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// A small Broadcast runs whole on the world part (without the phases'
// bookkeeping while it succeeds). When rank 3 disagrees on its root, rank 3
// gets a mismatch in its own call's terms; the others may complete theirs
// (the root's tree reached them before the news; the world part's own
// behaviour, as before the hierarchy ran it whole), and every rank's next
// call fails at once: the hierarchy is aborted, nobody waits.
func TestWorldCallMismatch(t *testing.T) {
	cs := build(t, layout{name: "2x2", perNode: []int{2, 2}}, "shm", hierarchy.Config{})
	errs := each(cs, func(r int, c comm.Communicator) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		root := 0
		if r == 3 {
			root = 1
		}
		x := []float32{float32(r), 1}
		err := c.Broadcast(ctx, comm.Host(x), root)
		var me *comm.MismatchError
		if r == 3 && (!errors.As(err, &me) || me.Local.Kind != comm.KindBroadcast || int(me.Local.Root) != root) {
			return fmt.Errorf("Broadcast from %d: %v, want a *comm.MismatchError naming this rank's own call", root, err)
		}
		if err != nil && !errors.Is(err, comm.ErrMismatch) {
			return fmt.Errorf("Broadcast from %d: %v, want nil or a mismatch", root, err)
		}
		return nextFailsAtOnce(ctx, c)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// nextFailsAtOnce checks that the call after a mismatch (a Barrier) fails
// at once instead of waiting.
func nextFailsAtOnce(ctx context.Context, c comm.Communicator) error {
	start := time.Now()
	if err := c.Barrier(ctx); err == nil || time.Since(start) > 5*time.Second {
		return fmt.Errorf("Barrier after the mismatch: %v after %v, want an error at once", err, time.Since(start))
	}
	return nil
}

// A call one rank refuses (a bad argument) is abandoned by every rank and
// mismatches nothing: a census taken later, while the ranks wait for a
// late one within its window, must not take the refused arguments for
// another call (it did in a multi-process run, where a Split waited past
// AskAfter: "rank 3 called AllReduce(0×dtype(0), sum)"), and the
// communicator goes on.
func TestRefusedCallIsNoMismatch(t *testing.T) {
	cs := build(t, layout{name: "2x2", perNode: []int{2, 2}}, "nexar", hierarchy.Config{})
	errs := each(cs, func(r int, c comm.Communicator) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		send, recv := make([]float32, 4), make([]float32, 4)
		op := comm.Sum
		if r == 3 {
			op = comm.ReduceOp(99) // refused: no such op
		}
		if err := c.AllReduce(ctx, comm.Host(send), comm.Host(recv), op); err == nil {
			return fmt.Errorf("AllReduce with a bad argument on rank 3 returned nil")
		}
		if r == 0 {
			time.Sleep(3 * hierarchy.DefaultAskAfter) // the others ask the census meanwhile
		}
		if err := c.Barrier(ctx); err != nil {
			return fmt.Errorf("Barrier after the refused call: %v", err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
