// Command allreduce is the smallest complete hiercomm program: it joins its
// job with hiercomm.Init, prints the topology (rank 0), sums a vector of
// rank-distinct integers across every rank, checks every element of the
// result, and leaves. Run it on emulated nodes with
//
//	go run ./cmd/hiercomm run --nodes 2 --ranks-per-node 2 -- ./examples/allreduce
//
// or under torchrun, srun or a Kubernetes Job (docs/deployment.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/comm"
)

func main() {
	n := flag.Int("n", 1<<20, "elements to reduce")
	flag.Parse()
	if err := run(*n); err != nil {
		slog.Error("allreduce failed", "err", err)
		os.Exit(1)
	}
}

func run(n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w, err := hiercomm.Init(ctx, hiercomm.Options{})
	if err != nil {
		return err
	}
	defer w.Close()
	rank, size := w.Rank(), w.Size()
	if rank == 0 {
		fmt.Println(w.Topology())
	}
	// Element i of rank r is r·n + i: every rank and every index differ, so
	// a shard reduced on the wrong rank or put in the wrong place shows.
	x := make([]int64, n)
	for i := range x {
		x[i] = int64(rank*n + i)
	}
	start := time.Now()
	if err := w.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); err != nil {
		return err
	}
	took := time.Since(start)
	p := int64(size)
	for i, v := range x {
		// Σ_r (r·n + i) = n·p(p−1)/2 + p·i
		if want := int64(n)*p*(p-1)/2 + p*int64(i); v != want {
			return fmt.Errorf("rank %d: element %d is %d, want %d", rank, i, v, want)
		}
	}
	fmt.Printf("rank %d/%d (node %d, local %d/%d): AllReduce of %d int64 correct in %v\n",
		rank, size, w.Node(), w.LocalRank(), w.LocalSize(), n, took.Round(time.Microsecond))
	return w.Barrier(ctx)
}
