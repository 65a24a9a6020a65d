package bench_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/hiercomm/hiercomm/bench"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar"
)

// Run measures collectives on any communicator, every rank with the same
// Spec, and gives every rank the same nccl-tests-style rows (the slowest
// rank's time per size). Here 4 ranks of an in-memory nexar world run in
// one process, with a Spec small enough for a test; cmd/hiercomm-bench runs
// it on the World that hiercomm.Init returns, one process per rank, and
// prints res.Format's tables. Times vary from run to run, so this prints
// what does not: the sizes and the checked results.
func ExampleRun() {
	ranks, err := nexar.NewMemoryWorld(4, nexar.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nexar.CloseAll(ranks)
	spec := bench.Spec{
		Ops:      []string{"allreduce", "reducescatter"},
		MinBytes: 64, MaxBytes: 4 << 10, Factor: 8,
		DType: comm.F32, Warmup: 1, Iters: 2, Repeats: 1,
		Check: true, // rank-distinct data, compared with a sequential reference (#wrong)
	}
	results := make([]bench.Result, len(ranks))
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for r, c := range ranks {
		wg.Go(func() { results[r], errs[r] = bench.Run(context.Background(), c, spec) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			fmt.Println("rank", r, err)
			return
		}
	}
	for _, row := range results[0].Rows { // every rank has the same rows
		fmt.Printf("%-13s %5d B  %4d elements  busbw = algbw × %.2f  #wrong %d\n",
			row.Op, row.Bytes, row.Count, bench.BusFactor(row.Op, results[0].Ranks), row.Wrong)
	}
	// Output:
	// allreduce        64 B    16 elements  busbw = algbw × 1.50  #wrong 0
	// allreduce       512 B   128 elements  busbw = algbw × 1.50  #wrong 0
	// allreduce      4096 B  1024 elements  busbw = algbw × 1.50  #wrong 0
	// reducescatter    64 B    16 elements  busbw = algbw × 0.75  #wrong 0
	// reducescatter   512 B   128 elements  busbw = algbw × 0.75  #wrong 0
	// reducescatter  4096 B  1024 elements  busbw = algbw × 0.75  #wrong 0
}
