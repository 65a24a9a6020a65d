package nexar_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar"
)

// Every rank contributes its vector; every rank gets the sum.
func ExampleComm_AllReduce() {
	ranks, err := nexar.NewMemoryWorld(4, nexar.Options{})
	if err != nil {
		panic(err)
	}
	defer nexar.CloseAll(ranks)
	out := make([][]float32, len(ranks))
	var wg sync.WaitGroup
	for r, c := range ranks {
		wg.Add(1)
		go func() { // one goroutine per rank, as one process per rank would be
			defer wg.Done()
			grad := []float32{float32(r), 1, 10 * float32(r)}
			if err := c.AllReduce(context.Background(), comm.Host(grad), comm.Host(grad), comm.Sum); err != nil {
				panic(err)
			}
			out[r] = grad
		}()
	}
	wg.Wait()
	fmt.Println(out[0], out[3])
	// Output: [6 4 60] [6 4 60]
}

// Start a collective, keep computing, wait later. Collectives are ordered
// by when they were started, so two in flight on one communicator are fine.
func ExampleComm_Start() {
	ranks, _ := nexar.NewMemoryWorld(2, nexar.Options{})
	defer nexar.CloseAll(ranks)
	var wg sync.WaitGroup
	for r, c := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			a := []int64{int64(r + 1)}
			b := make([]int64, 2)
			w1 := c.Start(ctx, comm.Call{Kind: comm.KindAllReduce, Send: comm.Host(a), Recv: comm.Host(a), Op: comm.Max})
			w2 := c.Start(ctx, comm.Call{Kind: comm.KindAllGather, Send: comm.Host([]int64{int64(10 * r)}), Recv: comm.Host(b)})
			// … compute here …
			if err := w2.Wait(); err != nil {
				panic(err)
			}
			if err := w1.Wait(); err != nil {
				panic(err)
			}
			if r == 0 {
				fmt.Println(a, b)
			}
		}()
	}
	wg.Wait()
	// Output: [2] [0 10]
}

// Split the world into two groups by parity; each group runs its own
// collectives, concurrently with the parent's.
func ExampleComm_Split() {
	ranks, _ := nexar.NewMemoryWorld(4, nexar.Options{})
	defer nexar.CloseAll(ranks)
	sums := make([]int32, 4)
	var wg sync.WaitGroup
	for r, c := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			sub, err := c.Split(ctx, r%2, r)
			if err != nil {
				panic(err)
			}
			defer sub.Close()
			x := []int32{int32(r)}
			if err := sub.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); err != nil {
				panic(err)
			}
			sums[r] = x[0]
		}()
	}
	wg.Wait()
	fmt.Println(sums) // evens: 0+2, odds: 1+3
	// Output: [2 4 2 4]
}
