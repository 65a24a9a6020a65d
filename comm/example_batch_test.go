package comm_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar"
)

// A Batch issues several collectives and a ring of Send and Recv as one
// unit. Every rank sends to its right and receives from its left in the
// same batch, which the blocking Send and Recv would deadlock: a batch
// posts every call before it waits for any.
func ExampleBatch() {
	const size = 3
	world, err := nexar.NewMemoryWorld(size, nexar.Options{Timeout: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	out := make([]string, size)
	var wg sync.WaitGroup
	for r, c := range world {
		wg.Go(func() {
			defer c.Close()
			grads := []float32{float32(r), 1}
			step := []int64{int64(10 * r)}
			from := []int32{-1}
			// The adders fail only after Start (a started batch is
			// fixed) or for a Kind that is no call.
			var b comm.Batch
			b.AllReduce(comm.Host(grads), comm.Host(grads), comm.Sum)
			b.Broadcast(comm.Host(step), 2)
			b.Send(comm.Host([]int32{int32(r)}), (r+1)%size, 0)
			b.Recv(comm.Host(from), (r+size-1)%size, 0)
			if err := b.Run(context.Background(), c); err != nil {
				panic(err)
			}
			out[r] = fmt.Sprintf("rank %d: grads %v, step %v, from rank %d", r, grads, step[0], from[0])
		})
	}
	wg.Wait()
	for _, line := range out {
		fmt.Println(line)
	}

	// An empty batch starts nothing: it is an invalid argument.
	var b comm.Batch
	fmt.Println(errors.Is(b.Run(context.Background(), world[0]), comm.ErrInvalidArgument))
	// Output:
	// rank 0: grads [3 3], step 20, from rank 2
	// rank 1: grads [3 3], step 20, from rank 0
	// rank 2: grads [3 3], step 20, from rank 1
	// true
}
