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

func benchSmall(b *testing.B, cs []comm.Communicator, flat bool) {
	ctx := context.Background()
	var wg sync.WaitGroup
	b.ResetTimer()
	for r, c := range cs {
		if flat {
			c = c.(*hierarchy.Comm).Flat()
		}
		wg.Go(func() {
			v := []float32{float32(r), 1}
			for range b.N {
				if err := c.AllReduce(ctx, comm.Host(v), comm.Host(v), comm.Max); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
