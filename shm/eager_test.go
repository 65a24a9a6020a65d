//go:build linux

package shm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// eagerCfg: eager broadcasts up to 1 KiB, bounded waits.
var eagerCfg = Config{SlotBytes: 64 << 10, Timeout: 30 * time.Second, FailureTimeout: time.Second}

// bcastData is what root puts in call i of n bytes: distinct per root,
// call and byte.
func bcastData(root, i, n int) []byte {
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(root*131 + i*31 + k*7 + 1)
	}
	return b
}

// Back-to-back broadcasts and scatters from every root, of sizes on both
// sides of the eager limit, with AllReduces and Barriers in between: every
// rank gets every root's bytes, to the bit.
func TestEagerBroadcastBackToBack(t *testing.T) {
	cs := localWorld(t, 4, eagerCfg)
	if !cs[0].eager(comm.Signature{Kind: comm.KindBroadcast, DType: comm.U8, Count: 1024}) ||
		!cs[0].eager(comm.Signature{Kind: comm.KindScatter, DType: comm.U8, Count: 256}) {
		t.Fatal("a 1 KiB Broadcast, or a Scatter of 4 × 256 B, does not go eager with these slots")
	}
	sizes := []int{0, 1, 8, 63, 64, 65, eagerSmall, eagerSmall + 1, 200, 1024, 1025, 3000, 4096, 4100}
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		ctx := context.Background()
		for i := range 200 {
			root, n := (i*7)%len(cs), sizes[i%len(sizes)]
			buf := make([]byte, n)
			if r == root {
				copy(buf, bcastData(root, i, n))
			} else {
				for k := range buf {
					buf[k] = byte(r) // rank-distinct until overwritten
				}
			}
			if err := c.Broadcast(ctx, comm.Host(buf), root); err != nil {
				return fmt.Errorf("call %d (root %d, %d B): %w", i, root, n, err)
			}
			if want := bcastData(root, i, n); string(buf) != string(want) {
				return fmt.Errorf("call %d (root %d, %d B): got %v, want %v", i, root, n, buf[:min(n, 8)], want[:min(n, 8)])
			}
			// A Scatter of the same root: eager up to 1 KiB of blocks
			// together (n/4 bytes each), staged above.
			m := n / 4
			var send []byte
			if r == root {
				send = bcastData(root+7, i, m*len(cs))
			}
			recv := make([]byte, m)
			if err := c.Scatter(ctx, comm.Host(send), comm.Host(recv), root); err != nil {
				return fmt.Errorf("Scatter %d (root %d, %d B blocks): %w", i, root, m, err)
			}
			if want := bcastData(root+7, i, m*len(cs))[r*m : (r+1)*m]; string(recv) != string(want) {
				return fmt.Errorf("Scatter %d (root %d, %d B blocks): got %v, want %v", i, root, m, recv[:min(m, 8)], want[:min(m, 8)])
			}
			switch i % 13 {
			case 5:
				x := []int64{int64(r)}
				if err := c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); err != nil || x[0] != 6 {
					return fmt.Errorf("AllReduce after call %d: %v, %v", i, x, err)
				}
			case 9:
				if err := c.Barrier(ctx); err != nil {
					return fmt.Errorf("Barrier after call %d: %w", i, err)
				}
			}
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// A root runs ahead of readers that have not come: its first broadcasts,
// as many as it has slots for the size (tiny messages have more), return
// without them, the next waits for a slot to be read, and the readers,
// arriving late, get every message intact (none was overwritten before it
// was read).
func TestEagerRootRunsAhead(t *testing.T) {
	for _, tc := range []struct{ n, slots int }{{eagerSmall, eagerSmallSlots}, {eagerSmall + 1, eagerSlots}} {
		t.Run(fmt.Sprintf("%dB", tc.n), func(t *testing.T) { rootRunsAhead(t, tc.n, tc.slots) })
	}
}

func rootRunsAhead(t *testing.T, n, slots int) {
	cs := localWorld(t, 3, eagerCfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	calls := 3 * slots
	ahead := make(chan int, calls) // the root's returned calls
	rootErr := make(chan error, 1)
	go func() {
		for i := range calls {
			if err := cs[0].Broadcast(ctx, comm.Host(bcastData(0, i, n)), 0); err != nil {
				rootErr <- fmt.Errorf("call %d: %w", i, err)
				return
			}
			ahead <- i
		}
		rootErr <- nil
	}()
	for i := range slots {
		select {
		case <-ahead:
		case err := <-rootErr:
			t.Fatalf("the root stopped before its readers came: %v", err)
		case <-ctx.Done():
			t.Fatalf("the root's broadcast %d did not return without its readers", i)
		}
	}
	// Every slot holds a message no reader has read: the next call must
	// wait. (If it returned, it overwrote call 0's unread slot, which
	// the readers' check below catches too.)
	select {
	case i := <-ahead:
		t.Fatalf("the root's broadcast %d returned with every slot unread", i)
	case <-time.After(50 * time.Millisecond):
	}
	errs := onEveryRank(cs[1:], func(r int, c *Comm) error {
		for i := range calls {
			buf := make([]byte, n)
			if err := c.Broadcast(ctx, comm.Host(buf), 0); err != nil {
				return fmt.Errorf("rank %d, call %d: %w", r+1, i, err)
			}
			if want := bcastData(0, i, n); string(buf) != string(want) {
				return fmt.Errorf("rank %d, call %d: got %v…, want %v…", r+1, i, buf[:8], want[:8])
			}
		}
		return nil
	})
	if err := errors.Join(append(errs, <-rootErr)...); err != nil {
		t.Fatal(err)
	}
	allReduceWorks(t, cs)
}

// A reader that dies while the root streams broadcasts: the root, whose
// slots fill, and the other reader, which stops hearing from the root
// once the root fails, both return an error naming a peer failure, in
// bounded time.
func TestEagerReaderDies(t *testing.T) {
	cs := localWorld(t, 3, eagerCfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		buf := make([]byte, 16)
		for i := 0; ; i++ {
			if r == 2 && i == 5 {
				c.kill()
				return nil
			}
			if err := c.Broadcast(ctx, comm.Host(buf), 0); err != nil {
				return err
			}
		}
	})
	took := time.Since(start)
	for r, err := range errs[:2] {
		if !errors.Is(err, comm.ErrPeerFailed) {
			t.Errorf("rank %d: %v; want a peer failure (comm.ErrPeerFailed)", r, err)
		}
	}
	if limit := eagerCfg.FailureTimeout + 3*time.Second; took > limit {
		t.Errorf("the survivors took %v to fail, beyond %v", took, limit)
	}
}

// A root that dies before it writes: its readers return an error naming
// it, in bounded time.
func TestEagerRootDies(t *testing.T) {
	cs := localWorld(t, 3, eagerCfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs[0].kill()
	errs := onEveryRank(cs[1:], func(r int, c *Comm) error {
		return c.Broadcast(ctx, comm.Host(make([]byte, 8)), 0)
	})
	for r, err := range errs {
		var pe *comm.PeerError
		if !errors.As(err, &pe) || pe.Peer != 0 {
			t.Errorf("rank %d: %v; want a *comm.PeerError naming rank 0", r+1, err)
		}
	}
}

// Ranks that disagree on an eager broadcast are told, each call or the
// next: roots that differ (every rank returns, the mismatch is in the
// next header), counts that differ and a Scatter against Broadcasts (the
// readers see it in the slot), and a root that calls a Barrier where its
// readers broadcast.
func TestEagerMismatch(t *testing.T) {
	cases := []mismatchCase{
		{"roots differ, each rank its own", func(r int, c *Comm) error {
			return c.Broadcast(context.Background(), comm.Host(make([]byte, 8)), r)
		}},
		{"counts differ", func(r int, c *Comm) error {
			return c.Broadcast(context.Background(), comm.Host(make([]byte, 8+r)), 0)
		}},
		{"the root scatters, the others broadcast", func(r int, c *Comm) error {
			if r == 0 {
				return c.Scatter(context.Background(), comm.Host(make([]byte, 24)), comm.Host(make([]byte, 8)), 0)
			}
			return c.Broadcast(context.Background(), comm.Host(make([]byte, 8)), 0)
		}},
		{"the root calls a Barrier", func(r int, c *Comm) error {
			if r == 0 {
				return c.Barrier(context.Background())
			}
			return c.Broadcast(context.Background(), comm.Host(make([]byte, 8)), 0)
		}},
	}
	runMismatches(t, cases)
}

// mismatchCase is a call on each rank r of 3 that some ranks make
// differently from the others.
type mismatchCase struct {
	name string
	call func(r int, c *Comm) error
}

// runMismatches runs each case, collective #2 of a fresh world of 3
// ranks, and checks that every rank gets the mismatch of #2, from the
// call or, where it returned first, from its next, a Barrier. A rank
// that hears of it from its peers' abort records gets it as news
// (comm.ErrMismatch); one that sees it itself, a *comm.MismatchError of
// the mismatched call.
func runMismatches(t *testing.T, cases []mismatchCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := localWorld(t, 3, eagerCfg)
			allReduceWorks(t, cs)
			errs := onEveryRank(cs, func(r int, c *Comm) error {
				err := tc.call(r, c)
				if err == nil { // it finished first: its next call says it
					err = c.Barrier(context.Background())
				}
				return err
			})
			for r, err := range errs {
				var me *comm.MismatchError
				switch {
				case !errors.Is(err, comm.ErrMismatch):
					t.Errorf("rank %d: %v; want the mismatch (comm.ErrMismatch)", r, err)
				case errors.As(err, &me) && me.Seq != 2:
					t.Errorf("rank %d: %v; want the mismatch of collective #2", r, err)
				}
			}
		})
	}
}

// A refusal: a reader's bad argument concerns only it (the root and the
// other reader finish); the root's reaches its readers as a
// *comm.RemoteError; either way the communicator goes on, and its next
// header does not take the refused call for a mismatch.
func TestEagerRefusal(t *testing.T) {
	cs := localWorld(t, 3, eagerCfg)
	for _, bad := range []int{2, 0} {
		errs := onEveryRank(cs, func(r int, c *Comm) error {
			buf := make([]byte, 8)
			root := 0
			if r == bad {
				root = -1
			}
			return c.Broadcast(context.Background(), comm.Host(buf), root)
		})
		for r, err := range errs {
			switch {
			case r == bad && !errors.Is(err, comm.ErrInvalidArgument):
				t.Errorf("bad rank %d: %v; want comm.ErrInvalidArgument", r, err)
			case r != bad && bad == 0 && !errors.Is(err, comm.ErrPeerAbandoned):
				t.Errorf("rank %d, root refused: %v; want comm.ErrPeerAbandoned", r, err)
			case r != bad && bad != 0 && err != nil:
				t.Errorf("rank %d, a reader refused: %v; want nil", r, err)
			}
		}
		allReduceWorks(t, cs)
	}
}

// Route says how shared memory runs a call, from the same decisions the
// call takes: eager for a small Broadcast, one step for a small AllReduce,
// in steps for a large one.
func TestRouteNamesTheWay(t *testing.T) {
	cs := localWorld(t, 2, Config{})
	for _, tc := range []struct {
		call comm.Call
		want string
	}{
		{comm.Call{Kind: comm.KindBroadcast, Send: comm.Host(make([]byte, 64)), Recv: comm.Host(make([]byte, 64))}, "eager: the root stages it and returns, 2 ranks"},
		{comm.Call{Kind: comm.KindBroadcast, Send: comm.Host(make([]byte, 4<<20)), Recv: comm.Host(make([]byte, 4<<20))}, "staged step by step, 2 ranks"},
		{comm.Call{Kind: comm.KindReduce, Send: comm.Host(make([]float32, 4)), Recv: comm.Host(make([]float32, 4)), Op: comm.Sum}, "eager: every rank stages its part, the others return, 2 ranks"},
		{comm.Call{Kind: comm.KindGather, Send: comm.Host(make([]float32, 4)), Recv: comm.Host(make([]float32, 8))}, "eager: every rank stages its part, the others return, 2 ranks"},
		{comm.Call{Kind: comm.KindAllReduce, Send: comm.Host(make([]float32, 4)), Recv: comm.Host(make([]float32, 4)), Op: comm.Sum}, "one step: every rank reduces the whole, 2 ranks"},
		{comm.Call{Kind: comm.KindAllReduce, Send: comm.Host(make([]float32, 4<<20)), Recv: comm.Host(make([]float32, 4<<20)), Op: comm.Sum}, "in steps: each rank reduces its slice, 2 ranks"},
	} {
		if got := cs[0].Route(tc.call); got != tc.want {
			t.Errorf("Route(%v) = %q, want %q", tc.call.Signature(), got, tc.want)
		}
	}
}

// toRootData is rank r's part in call i of n int32 elements: distinct per
// rank, call and element.
func toRootData(r, i, n int) []int32 {
	v := make([]int32, n)
	for k := range v {
		v[k] = int32(r*100003 + i*1009 + k*7 + 1)
	}
	return v
}

// Back-to-back Gathers and Reduces to every root, of sizes on both sides
// of the eager limit, some Reduces in place at the root, with Broadcasts and
// Barriers in between: every root gets every rank's part, to the bit, and
// its sums in rank order.
func TestEagerToRootBackToBack(t *testing.T) {
	cs := localWorld(t, 4, eagerCfg)
	P := len(cs)
	if !cs[0].eager(comm.Signature{Kind: comm.KindReduce, DType: comm.I32, Op: comm.Sum, Count: 256}) ||
		!cs[0].eager(comm.Signature{Kind: comm.KindGather, DType: comm.I32, Count: 256}) {
		t.Fatal("a 1 KiB Reduce, or a Gather of 1 KiB blocks, does not go eager with these slots")
	}
	counts := []int{0, 1, 2, 15, 16, 17, eagerSmall / 4, eagerSmall/4 + 1, 100, 256, 257, 1000}
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		ctx := context.Background()
		for i := range 240 {
			root, n := (i*5)%P, counts[i%len(counts)]
			inPlace := i%3 == 1 && r == root
			// Reduce: the sum of every rank's part, in rank order.
			send := toRootData(r, i, n)
			recv := make([]int32, n)
			var err error
			if inPlace {
				err = c.Reduce(ctx, comm.Host(send), comm.Host(send), comm.Sum, root)
				recv = send
			} else {
				err = c.Reduce(ctx, comm.Host(send), comm.Host(recv), comm.Sum, root)
			}
			if err != nil {
				return fmt.Errorf("Reduce %d (root %d, %d elements): %w", i, root, n, err)
			}
			if r == root {
				for k := range n {
					var want int32
					for q := range P {
						want += toRootData(q, i, n)[k]
					}
					if recv[k] != want {
						return fmt.Errorf("Reduce %d (root %d, %d elements): element %d is %d, want %d", i, root, n, k, recv[k], want)
					}
				}
			}
			// Gather: every rank's block at its place.
			all := make([]int32, P*n)
			if err := c.Gather(ctx, comm.Host(toRootData(r+10, i, n)), comm.Host(all), root); err != nil {
				return fmt.Errorf("Gather %d (root %d, %d elements): %w", i, root, n, err)
			}
			if r == root {
				for q := range P {
					if got, want := all[q*n:(q+1)*n], toRootData(q+10, i, n); !slices.Equal(got, want) {
						return fmt.Errorf("Gather %d (root %d, %d elements): rank %d's block %v…, want %v…", i, root, n, q, got[:min(n, 4)], want[:min(n, 4)])
					}
				}
			}
			switch i % 11 {
			case 4:
				buf := make([]byte, 8)
				if r == 1 {
					copy(buf, "from one")
				}
				if err := c.Broadcast(ctx, comm.Host(buf), 1); err != nil || string(buf) != "from one" {
					return fmt.Errorf("Broadcast after call %d: %q, %v", i, buf, err)
				}
			case 8:
				if err := c.Barrier(ctx); err != nil {
					return fmt.Errorf("Barrier after call %d: %w", i, err)
				}
			}
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	allReduceWorks(t, cs)
}

// The ranks of an eager Reduce run ahead of their root by a ring of
// slots, and no further: then they wait for it, and the root, once it
// comes, gets every call's sum.
func TestEagerRanksRunAheadOfTheirRoot(t *testing.T) {
	for _, tc := range []struct{ n, slots int }{{eagerSmall / 4, eagerSmallSlots}, {eagerSmall/4 + 1, eagerSlots}} {
		t.Run(fmt.Sprintf("%dB", 4*tc.n), func(t *testing.T) {
			cs := localWorld(t, 3, eagerCfg)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			calls := 3 * tc.slots
			ahead := make(chan int, 2*calls) // the non-roots' returned calls
			errs := make(chan error, 2)
			for r := 1; r < 3; r++ {
				go func() {
					for i := range calls {
						if err := cs[r].Reduce(ctx, comm.Host(toRootData(r, i, tc.n)), comm.Host([]int32{}), comm.Sum, 0); err != nil {
							errs <- fmt.Errorf("rank %d, call %d: %w", r, i, err)
							return
						}
						ahead <- i
					}
					errs <- nil
				}()
			}
			for i := range 2 * tc.slots {
				select {
				case <-ahead:
				case err := <-errs:
					t.Fatalf("a rank stopped before its root came: %v", err)
				case <-ctx.Done():
					t.Fatalf("call %d of the non-roots did not return without their root", i)
				}
			}
			select {
			case i := <-ahead:
				t.Fatalf("a non-root's Reduce %d returned with every slot unread", i)
			case <-time.After(50 * time.Millisecond):
			}
			for i := range calls {
				recv := make([]int32, tc.n)
				if err := cs[0].Reduce(ctx, comm.Host(toRootData(0, i, tc.n)), comm.Host(recv), comm.Sum, 0); err != nil {
					t.Fatalf("root, call %d: %v", i, err)
				}
				for k := range recv {
					if want := toRootData(0, i, tc.n)[k] + toRootData(1, i, tc.n)[k] + toRootData(2, i, tc.n)[k]; recv[k] != want {
						t.Fatalf("root, call %d: element %d is %d, want %d", i, k, recv[k], want)
					}
				}
			}
			if err := errors.Join(<-errs, <-errs); err != nil {
				t.Fatal(err)
			}
			allReduceWorks(t, cs)
		})
	}
}

// A rank that dies before it stages its part of an eager Gather: the
// root, which waits for it, returns an error naming it in bounded time;
// the other rank, which only staged, finds the failure at its next call.
func TestEagerGatherRankDies(t *testing.T) {
	cs := localWorld(t, 3, eagerCfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs[2].kill()
	start := time.Now()
	errs := onEveryRank(cs[:2], func(r int, c *Comm) error {
		err := c.Gather(ctx, comm.Host(make([]byte, 8)), comm.Host(make([]byte, 24)), 0)
		if err == nil {
			err = c.Barrier(ctx)
		}
		return err
	})
	for r, err := range errs {
		var pe *comm.PeerError
		if !errors.As(err, &pe) || pe.Peer != 2 {
			t.Errorf("rank %d: %v; want a *comm.PeerError naming rank 2", r, err)
		}
	}
	if limit := eagerCfg.FailureTimeout + 3*time.Second; time.Since(start) > limit {
		t.Errorf("the survivors took %v to fail, beyond %v", time.Since(start), limit)
	}
}

// Ranks that disagree on an eager Gather or Reduce are told, at this call
// or the next: roots that differ, counts that differ, and a Gather
// against Reduces.
func TestEagerToRootMismatch(t *testing.T) {
	cases := []mismatchCase{
		{"Gather: each rank its own root", func(r int, c *Comm) error {
			return c.Gather(context.Background(), comm.Host(make([]byte, 8)), comm.Host(make([]byte, 24)), r)
		}},
		{"Reduce: each rank its own root", func(r int, c *Comm) error {
			return c.Reduce(context.Background(), comm.Host(make([]int32, 2)), comm.Host(make([]int32, 2)), comm.Sum, r)
		}},
		{"Reduce: counts differ", func(r int, c *Comm) error {
			return c.Reduce(context.Background(), comm.Host(make([]int32, 2+r)), comm.Host(make([]int32, 2+r)), comm.Sum, 0)
		}},
		{"the root gathers, the others reduce", func(r int, c *Comm) error {
			if r == 0 {
				return c.Gather(context.Background(), comm.Host(make([]int32, 2)), comm.Host(make([]int32, 6)), 0)
			}
			return c.Reduce(context.Background(), comm.Host(make([]int32, 2)), comm.Host(make([]int32, 2)), comm.Sum, 0)
		}},
	}
	runMismatches(t, cases)
}

// A refusal in an eager Reduce: a non-root's bad argument reaches the
// root as a *comm.RemoteError and concerns no other rank; the root's own
// concerns only it; either way the communicator goes on.
func TestEagerToRootRefusal(t *testing.T) {
	cs := localWorld(t, 3, eagerCfg)
	for _, bad := range []int{2, 0} {
		errs := onEveryRank(cs, func(r int, c *Comm) error {
			op := comm.Sum
			if r == bad {
				op = comm.ReduceOp(99)
			}
			return c.Reduce(context.Background(), comm.Host(make([]int32, 4)), comm.Host(make([]int32, 4)), op, 0)
		})
		for r, err := range errs {
			switch {
			case r == bad && !errors.Is(err, comm.ErrInvalidArgument):
				t.Errorf("bad rank %d: %v; want comm.ErrInvalidArgument", r, err)
			case r == 0 && bad != 0 && !errors.Is(err, comm.ErrPeerAbandoned):
				t.Errorf("root, rank %d refused: %v; want comm.ErrPeerAbandoned", bad, err)
			case r != bad && r != 0 && err != nil:
				t.Errorf("rank %d, rank %d refused: %v; want nil", r, bad, err)
			}
		}
		allReduceWorks(t, cs)
	}
}

// Two ranks that only write in a mismatched eager collective (a
// Broadcast's root and a Reduce's non-root) both return; their next
// header finds the mismatch. When one finds it first, alone in that
// header (it sees the other's eager line) and aborts, the other, arriving
// after it left, reports the mismatch itself — a *comm.MismatchError of
// that collective, as the headers' digests show it — not the first one's
// leaving.
func TestEagerMismatchAfterThePeerLeft(t *testing.T) {
	cs := localWorld(t, 2, eagerCfg)
	allReduceWorks(t, cs) // collective #1
	ctx := context.Background()
	if err := cs[0].Broadcast(ctx, comm.Host(make([]float32, 1)), 0); err != nil {
		t.Fatalf("rank 0, a Broadcast's root, writes and returns: %v", err)
	}
	if err := cs[1].Reduce(ctx, comm.Host(make([]float32, 1)), comm.Host(make([]float32, 1)), comm.Sum, 0); err != nil {
		t.Fatalf("rank 1, a Reduce's non-root, writes and returns: %v", err)
	}
	for r, c := range []*Comm{cs[1], cs[0]} { // rank 1 first, alone
		err := c.Barrier(ctx)
		var me *comm.MismatchError
		switch {
		case !errors.As(err, &me):
			t.Errorf("rank %d's next call: %v; want a *comm.MismatchError", 1-r, err)
		case me.Seq != 2:
			t.Errorf("rank %d's next call: %v; want the mismatch of collective #2", 1-r, err)
		}
	}
}
