package nccl_test

import (
	"context"
	"sync"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// BenchmarkSmallAllReduce is a 4-element AllReduce on 4 ranks of the
// fake, whose control is an in-memory nexar world: what the record every
// collective gathers over the control costs, beside the rest of the path
// (the fake's own reduction is a few elements):
//
//	go test -run '^$' -bench SmallAllReduce -count 6 ./nccl/
func BenchmarkSmallAllReduce(b *testing.B) {
	const n = 4
	comms, dev := fakeWorld(b, n)
	bufs := deviceBufs(b, dev, n, 4)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Go(func() {
				if err := c.AllReduce(ctx, bufs[r], bufs[r], comm.Sum); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
}
