// Command gpu averages a gradient-sized vector that lives in GPU memory
// across every rank: it joins its job with hiercomm.Init, which on GPU
// nodes returns a communicator on device memory (NCCL inside a node, device
// data staged through pinned host memory between nodes), allocates device
// buffers on the rank's GPU, fills them with rank-distinct values, runs
// AllReduce (Avg) several times, checks every element and prints the
// measured bandwidth. Run it on emulated single-GPU nodes with
//
//	go run ./cmd/hiercomm run --nodes 2 --ranks-per-node 1 -- ./examples/gpu
//
// or under torchrun/srun on GPU hosts (docs/gpu.md). With -fake-gpu it runs
// on nccl's in-process fake (host memory standing in for device memory), so
// it can be tried — and is tested — where there is no GPU; the fake spans
// one process, so each node may then hold one rank only.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nccl/ncclfake"
)

func main() {
	n := flag.Int("n", 4<<20, "f32 elements to average (4 bytes each)")
	iters := flag.Int("iters", 5, "timed AllReduces after one warm-up")
	fake := flag.Bool("fake-gpu", false, "run on nccl's in-process fake instead of a GPU")
	flag.Parse()
	if err := run(*n, *iters, *fake); err != nil {
		slog.Error("gpu example failed", "err", err)
		os.Exit(1)
	}
}

func run(n, iters int, fake bool) error {
	if iters < 1 {
		return fmt.Errorf("-iters %d: want at least 1 timed AllReduce", iters)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	opt := hiercomm.Options{}
	if fake {
		opt.GPU = ncclfake.New(ncclfake.Options{Devices: 1})
	} else if err := nccl.Available(); err != nil {
		return fmt.Errorf("no GPU to run on (try -fake-gpu): %w", err)
	}
	w, err := hiercomm.Init(ctx, opt)
	if err != nil {
		return err
	}
	defer w.Close()
	dev := w.Device()
	if dev == nil {
		return fmt.Errorf("rank %d: the world moves host memory (HIERCOMM_INTRA=%s?): nothing to do on a GPU", w.Rank(), os.Getenv("HIERCOMM_INTRA"))
	}
	rank, size := w.Rank(), w.Size()
	if rank == 0 {
		fmt.Println(w.Topology())
	}

	// Element i of rank r is (r·n + i) mod 1024 / 4: small multiples of
	// 1/4, so every partial sum is exact in f32 and the average is the
	// exact sum divided once.
	host := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(host[4*i:], math.Float32bits(float32((rank*n+i)%1024)/4))
	}
	grads, err := dev.Alloc(comm.F32, n)
	if err != nil {
		return err
	}
	defer dev.Free(grads)

	var took []time.Duration
	for it := range iters + 1 {
		if err := dev.Write(grads, host); err != nil {
			return err
		}
		start := time.Now()
		if err := w.AllReduce(ctx, grads, grads, comm.Avg); err != nil {
			return err
		}
		if it > 0 {
			took = append(took, time.Since(start))
		}
	}
	out := make([]byte, 4*n)
	if err := dev.Read(out, grads); err != nil {
		return err
	}
	for i := range n {
		var sum float64
		for r := range size {
			sum += float64((r*n+i)%1024) / 4
		}
		want := float32(sum / float64(size))
		if got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:])); got != want {
			return fmt.Errorf("rank %d: element %d is %v, want %v", rank, i, got, want)
		}
	}
	best := took[0]
	for _, d := range took {
		best = min(best, d)
	}
	busbw := 2 * float64(size-1) / float64(size) * float64(4*n) / best.Seconds() / 1e9
	fmt.Printf("rank %d/%d on %v: AllReduce(avg) of %d f32 on device memory correct; best of %d: %v, busbw %.2f GB/s\n",
		rank, size, dev, n, iters, best.Round(time.Microsecond), busbw)
	return w.Barrier(ctx)
}
