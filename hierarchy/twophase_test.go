package hierarchy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// TestTwoPhaseStayOffTheWorld checks where Gather, Scatter, AllToAllV,
// Scan and ExScan run on a 3×2 hierarchy: nothing on the world part (the
// flat path), one operation per rail for the exchanges with data only on
// the root's rail for the rooted ones, and the nodes' prefix on the last
// rail only; and that the results are right.
func TestTwoPhaseStayOffTheWorld(t *testing.T) {
	const N, G, n = 3, 2, 5
	const P = N * G
	const gatherRoot, scatterRoot = 3, 2 // local ranks 1 and 0
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hs, worlds, rails := countedHierarchy(ctx, t, N, G, Config{})
	val := func(src, dst, i int) int64 { return int64(src*1_000_000 + dst*1000 + i) }
	vcount := func(src, dst int) int { return (src + 2*dst) % 4 } // zeros included
	errs := make([]error, P)
	var wg sync.WaitGroup
	for r := range P {
		wg.Go(func() {
			h := hs[r]
			fail := func(format string, a ...any) { errs[r] = fmt.Errorf("rank %d: "+format, append([]any{r}, a...)...) }
			// Gather: block q of the root's recv is rank q's send.
			send := make([]int64, n)
			for i := range send {
				send[i] = val(r, 0, i)
			}
			all := make([]int64, P*n)
			// Op means nothing to Gather: an Avg left in the Call must not
			// divide the result.
			gather := comm.Call{Kind: comm.KindGather, Send: comm.Host(send), Recv: comm.Host(all), Root: gatherRoot, Op: comm.Avg}
			if err := h.Start(ctx, gather).Wait(); err != nil {
				fail("Gather: %v", err)
				return
			}
			for q := range P {
				for i := range n {
					if r == gatherRoot && all[q*n+i] != val(q, 0, i) {
						fail("Gather: recv[%d] = %d, want %d", q*n+i, all[q*n+i], val(q, 0, i))
						return
					}
				}
			}
			// Scatter: rank q gets block q of the root's send.
			for q := range P {
				for i := range n {
					all[q*n+i] = val(r, q, i)
				}
			}
			mine := make([]int64, n)
			if err := h.Scatter(ctx, comm.Host(all), comm.Host(mine), scatterRoot); err != nil {
				fail("Scatter: %v", err)
				return
			}
			for i, v := range mine {
				if v != val(scatterRoot, r, i) {
					fail("Scatter: recv[%d] = %d, want %d", i, v, val(scatterRoot, r, i))
					return
				}
			}
			// AllToAllV with counts that differ per pair.
			sc, rc := make([]int, P), make([]int, P)
			var vs []int64
			for q := range P {
				sc[q], rc[q] = vcount(r, q), vcount(q, r)
				for i := range sc[q] {
					vs = append(vs, val(r, q, i))
				}
			}
			vr := make([]int64, sum(rc))
			if err := h.AllToAllV(ctx, comm.Host(vs), sc, comm.Host(vr), rc); err != nil {
				fail("AllToAllV: %v", err)
				return
			}
			at := 0
			for q := range P {
				for i := range rc[q] {
					if vr[at] != val(q, r, i) {
						fail("AllToAllV: recv[%d] = %d, want %d (element %d from rank %d)", at, vr[at], val(q, r, i), i, q)
						return
					}
					at++
				}
			}
			// Scan and ExScan of rank-distinct values.
			for _, kind := range []comm.Kind{comm.KindScan, comm.KindExScan} {
				in, out := []int64{int64(r*r + 1), int64(-r)}, make([]int64, 2)
				if err := h.Start(ctx, comm.Call{Kind: kind, Send: comm.Host(in), Recv: comm.Host(out), Op: comm.Sum}).Wait(); err != nil {
					fail("%v: %v", kind, err)
					return
				}
				want := []int64{0, 0}
				end := r
				if kind == comm.KindExScan {
					end = r - 1
				}
				for q := 0; q <= end; q++ {
					want[0] += int64(q*q + 1)
					want[1] -= int64(q)
				}
				if out[0] != want[0] || out[1] != want[1] {
					fail("%v: got %v, want %v", kind, out, want)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for r := range P {
		if len(worlds[r].ops) != 0 {
			t.Errorf("rank %d: the world part ran %v; want nothing (every one of these has a 2D path)", r, worlds[r].ops)
		}
		l := r % G
		want := map[comm.Kind]int{comm.KindGather: 1, comm.KindScatter: 1, comm.KindAllToAllV: 1}
		if l == G-1 {
			want[comm.KindExScan] = 2 // the nodes' prefix for Scan and for ExScan
		}
		if got := rails[r].ops; !maps.Equal(got, want) {
			t.Errorf("rank %d: rail %d ran %v; want %v", r, l, got, want)
		}
		gathered := 0 // bytes this rank gives its rail in the Gather: its node's blocks on the root's rail
		if l == gatherRoot%G {
			gathered = G * n * 8
		}
		if got := rails[r].kinds[comm.KindGather]; got != gathered {
			t.Errorf("rank %d: gave rail %d %d bytes in the Gather; want %d (only the root's rail carries data)", r, l, got, gathered)
		}
	}
}

// TestAllToAllVCountsDisagree: rank 0 sends 2 elements to rank 3 and rank
// 1 sends it 1, while rank 3 expects 1 from rank 0 and 2 from rank 1. The
// totals on the rail agree, so only the counts in the messages can tell:
// rank 3 must report a mismatch naming rank 0, and every rank must end
// with ErrMismatch (at once, or from its next call).
func TestAllToAllVCountsDisagree(t *testing.T) {
	const N, G = 2, 2
	const P = N * G
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hs, _, _ := countedHierarchy(ctx, t, N, G, Config{})
	errs := make([]error, P)
	var wg sync.WaitGroup
	for r := range P {
		wg.Go(func() {
			sc, rc := []int{1, 1, 1, 1}, []int{1, 1, 1, 1}
			switch r {
			case 0:
				sc[3] = 2
			case 3:
				rc[1] = 2
			}
			send, recv := comm.Host(make([]float32, sum(sc))), comm.Host(make([]float32, sum(rc)))
			call := comm.Call{Kind: comm.KindAllToAllV, Send: send, SendCounts: sc, Recv: recv, RecvCounts: rc}
			err := hs[r].Start(ctx, call).Wait()
			if err == nil {
				if err = hs[r].Barrier(ctx); !errors.Is(err, comm.ErrMismatch) {
					errs[r] = fmt.Errorf("rank %d: AllToAllV returned nil and the next Barrier %v; want the mismatch", r, err)
				}
				return
			}
			var me *comm.MismatchError
			switch {
			case !errors.As(err, &me):
				errs[r] = fmt.Errorf("rank %d: got %v; want a *comm.MismatchError", r, err)
			case me.Local != call.Signature():
				errs[r] = fmt.Errorf("rank %d: MismatchError.Local = %v, want %v", r, me.Local, call.Signature())
			case r == 3 && me.Peer != 0:
				errs[r] = fmt.Errorf("rank 3: the mismatch names rank %d, want rank 0: %v", me.Peer, err)
			}
			if r == 3 {
				t.Logf("rank 3: %v", err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}
