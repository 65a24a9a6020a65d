package comm_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar"
)

// rankZeroOf runs f on every rank of an in-memory world of n ranks and
// returns rank 0's line.
func rankZeroOf(n int, f func(c comm.Communicator) (string, error)) string {
	world, err := nexar.NewMemoryWorld(n, nexar.Options{Timeout: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	lines, errs := make([]string, n), make([]error, n)
	var wg sync.WaitGroup
	for r, c := range world {
		wg.Go(func() { lines[r], errs[r] = f(c) })
	}
	wg.Wait()
	for _, c := range world {
		c.Close()
	}
	for _, err := range errs {
		if err != nil {
			panic(err)
		}
	}
	return lines[0]
}

// PreMulSum multiplies each rank's input by that rank's own factor before
// the sum (NCCL's ncclRedOpCreatePreMulSum, torch's PREMUL_SUM). No
// blocking method carries the factor: Start a Call with Scalar set.
func ExampleCall_preMulSum() {
	fmt.Println(rankZeroOf(3, func(c comm.Communicator) (string, error) {
		g := []float32{1, 2, 3}
		factor := []float64{0.5, 1, 2}[c.Rank()] // ranks may differ
		w := c.Start(context.Background(), comm.Call{Kind: comm.KindAllReduce,
			Send: comm.Host(g), Recv: comm.Host(g), Op: comm.PreMulSum, Scalar: factor})
		err := w.Wait()
		return fmt.Sprint(g), err
	}))
	// Output: [3.5 7 10.5]
}

// Bool reduces logically (Sum is OR, Prod is AND), and the integer types
// take the bitwise ops.
func ExampleBool() {
	fmt.Println(rankZeroOf(2, func(c comm.Communicator) (string, error) {
		ctx := context.Background()
		r := c.Rank()
		any, all := []bool{r == 0, false, true}, []bool{r == 0, false, true}
		bits := []uint16{0x00ff << (4 * r), 1}
		if err := c.AllReduce(ctx, comm.Host(any), comm.Host(any), comm.Sum); err != nil {
			return "", err
		}
		if err := c.AllReduce(ctx, comm.Host(all), comm.Host(all), comm.Prod); err != nil {
			return "", err
		}
		if err := c.AllReduce(ctx, comm.Host(bits), comm.Host(bits), comm.BXor); err != nil {
			return "", err
		}
		return fmt.Sprintf("or %v, and %v, xor %#04x", any, all, bits), nil
	}))
	// Output: or [true false true], and [false false true], xor [0x0f0f 0x0000]
}

// The fp8 conversions round to nearest even and saturate at the largest
// finite value, as CUDA's __NV_SATFINITE conversions that NCCL uses.
func ExampleFloat8E4M3From() {
	for _, f := range []float32{1, 0.3, 17, 1000, float32(math.Inf(1))} {
		x := comm.Float8E4M3From(f)
		fmt.Printf("%v → %#02x = %v\n", f, uint8(x), x.Float32())
	}
	fmt.Println(comm.Float8E5M2From(1e6).Float32())
	// Output:
	// 1 → 0x38 = 1
	// 0.3 → 0x2a = 0.3125
	// 17 → 0x58 = 16
	// 1000 → 0x7e = 448
	// +Inf → 0x7e = 448
	// 57344
}
