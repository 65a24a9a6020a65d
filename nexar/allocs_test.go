//go:build !race

package nexar

import (
	"context"
	"fmt"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// TestSmallAllReduceAllocatesNothing: a blocking 8-byte AllReduce, in
// steady state, allocates nothing on any rank (the op is reused, its
// schedule cached, its runner on the stack, the frames' buffers pooled,
// the failure machine's notes kept by value, the transport's reads
// staged in a buffer of the link). Every rank of the world runs in this
// process, so testing.AllocsPerRun counts them all, the read loops too.
// (Not under the race detector, which allocates on its own.)
func TestSmallAllReduceAllocatesNothing(t *testing.T) {
	for _, tc := range []struct {
		network string
		ranks   int
	}{{"tcp", 2}, {"tcp", 4}, {"mem", 4}} {
		t.Run(fmt.Sprintf("%s/%d", tc.network, tc.ranks), func(t *testing.T) {
			var cs []*Comm
			if tc.network == "mem" {
				var err error
				if cs, err = NewMemoryWorld(tc.ranks, Options{}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { CloseAll(cs) })
			} else {
				cs = localWorld(t, tc.ranks, tc.network)
			}
			ctx := context.Background()
			// Every rank but 0 runs on a goroutine of its own, started
			// once: a call is a token on go, its end a token on done.
			start, done := make(chan struct{}), make(chan error)
			for _, c := range cs[1:] {
				go func() {
					v := []float32{float32(c.Rank()), 1}
					for range start {
						done <- c.AllReduce(ctx, comm.Host(v), comm.Host(v), comm.Max)
					}
				}()
			}
			defer close(start)
			v := []float32{0, 1}
			call := func() {
				for range cs[1:] {
					start <- struct{}{}
				}
				if err := cs[0].AllReduce(ctx, comm.Host(v), comm.Host(v), comm.Max); err != nil {
					t.Fatal(err)
				}
				for range cs[1:] {
					if err := <-done; err != nil {
						t.Fatal(err)
					}
				}
			}
			for range 200 { // steady state: pools and caches filled
				call()
			}
			if got := testing.AllocsPerRun(500, call); got >= 1 {
				t.Errorf("a blocking 8-byte AllReduce on %d ranks over %s allocates %.2f times per call (all ranks together), want 0", tc.ranks, tc.network, got)
			}
			if want := float32(len(cs) - 1); v[0] != want {
				t.Errorf("AllReduce(Max) gave %v, want %v", v[0], want)
			}
		})
	}
}
