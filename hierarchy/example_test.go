package hierarchy_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/nexar"
	"github.com/hiercomm/hiercomm/topology"
)

// Build composes the 2D communicator of a job of 2 nodes × 2 ranks from a
// flat world and the topology: it splits the world into each node's intra
// part and each local rank's rail. Here the world is an in-memory nexar
// world in one process and the intra parts are split off it too;
// hiercomm.Init does the same over QUIC between nodes, with shared memory
// (or NCCL) as the intra part.
func ExampleBuild() {
	tp, err := topology.New([]topology.Member{
		{Rank: 0, Host: "node-a", Local: 0, Device: -1},
		{Rank: 1, Host: "node-a", Local: 1, Device: -1},
		{Rank: 2, Host: "node-b", Local: 0, Device: -1},
		{Rank: 3, Host: "node-b", Local: 1, Device: -1},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	world, err := nexar.NewMemoryWorld(tp.Size(), nexar.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	lines := make([]string, tp.Size())
	errs := make([]error, tp.Size())
	var wg sync.WaitGroup
	for r := range world { // one goroutine per rank, as one process per rank would be
		wg.Go(func() {
			ctx := context.Background()
			h, err := hierarchy.Build(ctx, world[r], tp, nil, hierarchy.Config{})
			if err != nil {
				errs[r] = err
				world[r].Close()
				return
			}
			defer h.Close() // closes the world and the parts too
			grads := []float32{float32(r), 1}
			// Small: intra Reduce → the leads' AllReduce → intra Broadcast.
			// Large: intra ReduceScatter → every rail → intra AllGather.
			errs[r] = h.AllReduce(ctx, comm.Host(grads), comm.Host(grads), comm.Sum)
			intra, rail := h.Parts()
			lines[r] = fmt.Sprintf("rank %d: node %d, intra rank %d of %d, rail rank %d of %d: %v",
				r, tp.NodeOf(r), intra.Rank(), intra.Size(), rail.Rank(), rail.Size(), grads)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			fmt.Println("rank", r, err)
			return
		}
	}
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// rank 0: node 0, intra rank 0 of 2, rail rank 0 of 2: [6 4]
	// rank 1: node 0, intra rank 1 of 2, rail rank 0 of 2: [6 4]
	// rank 2: node 1, intra rank 0 of 2, rail rank 1 of 2: [6 4]
	// rank 3: node 1, intra rank 1 of 2, rail rank 1 of 2: [6 4]
}
