package comm_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar"
)

// BenchmarkBatch is what a batch of small AllReduces costs on a host tier
// (nexar's in-memory transport, 2 ranks), against the same AllReduces
// started one by one and waited for together, and against
// comm.AllReduceFused, which packs them into one: whether fusing a
// batch's AllReduces into one message stream would pay. Each op is one
// step of every rank.
func BenchmarkBatch(b *testing.B) {
	const size = 2
	for _, shape := range []struct{ bufs, n int }{{32, 256}, {16, 2048}, {16, 4096}, {8, 16384}} {
		world, err := nexar.NewMemoryWorld(size, nexar.Options{Timeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		bufs := make([][]comm.Buffer, size)
		batches := make([]*comm.Batch, size)
		for r := range size {
			batches[r] = new(comm.Batch)
			for range shape.bufs {
				x := comm.Host(make([]float32, shape.n))
				bufs[r] = append(bufs[r], x)
				batches[r].AllReduce(x, x, comm.Sum)
			}
		}
		step := func(f func(r int, c comm.Communicator) error) {
			var wg sync.WaitGroup
			for r, c := range world {
				wg.Go(func() {
					if err := f(r, c); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
		}
		ctx := context.Background()
		name := fmt.Sprintf("%dx%d", shape.bufs, shape.n)
		b.Run(name+"/batch", func(b *testing.B) {
			for b.Loop() {
				step(func(r int, c comm.Communicator) error { return batches[r].Run(ctx, c) })
			}
		})
		b.Run(name+"/each", func(b *testing.B) {
			for b.Loop() {
				step(func(r int, c comm.Communicator) error {
					works := make([]*comm.Work, len(bufs[r]))
					for i, x := range bufs[r] {
						works[i] = comm.StartAllReduce(ctx, c, x, x, comm.Sum)
					}
					for _, w := range works {
						if err := w.Wait(); err != nil {
							return err
						}
					}
					return nil
				})
			}
		})
		b.Run(name+"/fused", func(b *testing.B) {
			for b.Loop() {
				step(func(r int, c comm.Communicator) error { return comm.AllReduceFused(ctx, c, bufs[r], comm.Sum) })
			}
		})
		nexar.CloseAll(world)
	}
}
