package hierarchy_test

import (
	"context"
	"sync"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/hierarchy"
)

// BenchmarkSmallAllReduce times a blocking 8-byte AllReduce on a 2 × 2
// hierarchy (an in-memory nexar world between nodes; shared memory, or a
// Split of that world, inside a node), every rank a goroutine of this
// process, and the same on its flat world part: the software cost of a
// small collective, without a network. With shared memory the node's
// ranks spin for each other on the process's few CPUs, which an
// in-process run exaggerates. (The bench command measures it over real
// sockets and processes.)
func BenchmarkSmallAllReduce(b *testing.B) {
	for _, intra := range []string{"shm", "nexar"} {
		cs := build(b, layout{name: "2x2", perNode: []int{2, 2}}, intra, hierarchy.Config{})
		for _, mode := range []string{"hier", "flat"} {
			b.Run(intra+"/"+mode, func(b *testing.B) { benchSmall(b, cs, mode == "flat") })
		}
	}
}

// BenchmarkSmallBroadcast is BenchmarkSmallAllReduce for an 8-byte
// Broadcast from rank 0, which the hierarchy runs on its world part: the
// difference to flat is the hierarchy's own per-call cost.
func BenchmarkSmallBroadcast(b *testing.B) {
	cs := build(b, layout{name: "2x2", perNode: []int{2, 2}}, "shm", hierarchy.Config{})
	for _, mode := range []string{"hier", "flat"} {
		b.Run(mode, func(b *testing.B) {
			benchCalls(b, cs, mode == "flat", func(c comm.Communicator, v []float32) error {
				return c.Broadcast(context.Background(), comm.Host(v), 0)
			})
		})
	}
}

func benchSmall(b *testing.B, cs []comm.Communicator, flat bool) {
	benchCalls(b, cs, flat, func(c comm.Communicator, v []float32) error {
		return c.AllReduce(context.Background(), comm.Host(v), comm.Host(v), comm.Max)
	})
}

// benchCalls runs call b.N times on every rank at once, on the hierarchy
// or on its flat world part, with a 2-float vector of the rank's own.
func benchCalls(b *testing.B, cs []comm.Communicator, flat bool, call func(comm.Communicator, []float32) error) {
	var wg sync.WaitGroup
	b.ResetTimer()
	for r, c := range cs {
		if flat {
			c = c.(*hierarchy.Comm).Flat()
		}
		wg.Go(func() {
			v := []float32{float32(r), 1}
			for range b.N {
				if err := call(c, v); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
