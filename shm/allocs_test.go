//go:build linux && !race

package shm

import (
	"context"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// TestSmallCallsAllocateNothing: in steady state, a blocking 8-byte
// AllReduce, and an eager Broadcast, Reduce and Gather, allocate nothing
// on any rank (the op is reused, the failure machine keeps its entries
// in place, the eager root's views of the slots are kept). Every rank
// runs in this process, so testing.AllocsPerRun counts them all. (Not
// under the race detector, which allocates on its own.)
func TestSmallCallsAllocateNothing(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func(c *Comm, send, recv []float32) error
	}{
		{"AllReduce", func(c *Comm, send, recv []float32) error {
			return c.AllReduce(ctx, comm.Host(send), comm.Host(recv[:len(send)]), comm.Sum)
		}},
		{"Broadcast", func(c *Comm, send, _ []float32) error { return c.Broadcast(ctx, comm.Host(send), 0) }},
		{"Reduce", func(c *Comm, send, recv []float32) error {
			return c.Reduce(ctx, comm.Host(send), comm.Host(recv[:len(send)]), comm.Sum, 0)
		}},
		{"Gather", func(c *Comm, send, recv []float32) error {
			return c.Gather(ctx, comm.Host(send), comm.Host(recv), 0)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := localWorld(t, 4, Config{})
			// Every rank but 0 runs on a goroutine of its own, started
			// once: a call is a token on start, its end one on done.
			start, done := make(chan struct{}), make(chan error)
			for _, c := range cs[1:] {
				go func() {
					send, recv := []float32{float32(c.rank), 1}, make([]float32, 2*len(cs))
					for range start {
						done <- tc.call(c, send, recv)
					}
				}()
			}
			defer close(start)
			send, recv := []float32{0, 1}, make([]float32, 2*len(cs))
			call := func() {
				for range cs[1:] {
					start <- struct{}{}
				}
				if err := tc.call(cs[0], send, recv); err != nil {
					t.Fatal(err)
				}
				for range cs[1:] {
					if err := <-done; err != nil {
						t.Fatal(err)
					}
				}
			}
			for range 300 { // steady state: pools and caches filled, every slot used
				call()
			}
			if got := testing.AllocsPerRun(500, call); got >= 1 {
				t.Errorf("a blocking 8-byte %s on %d ranks allocates %.2f times per call (all ranks together), want 0", tc.name, len(cs), got)
			}
		})
	}
}
