// Command dataparallel trains a small linear model data-parallel across
// local processes: every rank computes gradients on its own shard of the
// data, the gradients of all parameter tensors are averaged in one fused
// AllReduce (comm.AllReduceFused), and every rank applies the same update,
// so the replicas stay bit-identical.
//
//	go run ./examples/dataparallel -np 4
//
// It starts -np copies of itself joined over QUIC on 127.0.0.1 (nexar's
// local launcher); each prints its loss, and rank 0 checks at the end that
// every replica holds the same weights.
package main

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"unsafe"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/examples/internal/launch"
	"github.com/hiercomm/hiercomm/nexar"
)

func main() {
	np := flag.Int("np", 4, "number of ranks (processes)")
	steps := flag.Int("steps", 200, "training steps")
	network := flag.String("network", "quic", "quic or tcp")
	flag.Parse()
	launch.Main(*np, *network, func() error { return train(*steps) })
}

// The model: y = W·x + b with W 4×16 and b 4, the "layers" a trainer would
// hand to the communicator as separate tensors.
const in, out, samples = 16, 4, 256

func train(steps int) error {
	ctx := context.Background()
	c, err := nexar.JoinLocal(ctx, os.Getenv, nexar.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	rank, size := c.Rank(), c.Size()

	// The true model every rank's data comes from, and this rank's shard.
	truth := rand.New(rand.NewPCG(1, 2))
	trueW := make([]float32, out*in)
	for i := range trueW {
		trueW[i] = float32(truth.NormFloat64())
	}
	data := rand.New(rand.NewPCG(3, uint64(rank)))
	xs := make([][in]float32, samples)
	ys := make([][out]float32, samples)
	for s := range xs {
		for j := range in {
			xs[s][j] = float32(data.NormFloat64())
		}
		for o := range out {
			var y float32 = 0.5
			for j := range in {
				y += trueW[o*in+j] * xs[s][j]
			}
			ys[s][o] = y
		}
	}

	w := make([]float32, out*in) // every rank starts from the same zeros
	b := make([]float32, out)
	gw := make([]float32, out*in)
	gb := make([]float32, out)
	lossBuf := make([]float64, 1)
	for step := range steps {
		clear(gw)
		clear(gb)
		var loss float64
		for s := range xs {
			for o := range out {
				pred := b[o]
				for j := range in {
					pred += w[o*in+j] * xs[s][j]
				}
				e := pred - ys[s][o]
				loss += float64(e * e)
				gb[o] += 2 * e / samples
				for j := range in {
					gw[o*in+j] += 2 * e * xs[s][j] / samples
				}
			}
		}
		// One collective for all gradient tensors: the mean over ranks.
		if err := comm.AllReduceFused(ctx, c, []comm.Buffer{comm.Host(gw), comm.Host(gb)}, comm.Avg); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		for i := range w {
			w[i] -= 0.05 * gw[i]
		}
		for i := range b {
			b[i] -= 0.05 * gb[i]
		}
		if step%50 == 0 || step == steps-1 {
			lossBuf[0] = loss / samples
			if err := c.AllReduce(ctx, comm.Host(lossBuf), comm.Host(lossBuf), comm.Avg); err != nil {
				return err
			}
			if rank == 0 {
				fmt.Printf("step %4d  loss %.6f\n", step, lossBuf[0])
			}
		}
	}
	// The replicas must be identical: gather a hash of every rank's weights.
	h := fnv.New64a()
	h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 4*len(w)))
	h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), 4*len(b)))
	hashes := make([]uint64, size)
	if err := c.AllGather(ctx, comm.Host([]uint64{h.Sum64()}), comm.Host(hashes)); err != nil {
		return err
	}
	for r, x := range hashes {
		if x != hashes[0] {
			return fmt.Errorf("rank %d's weights differ from rank 0's", r)
		}
	}
	if rank == 0 {
		var maxErr float64
		for i := range w {
			maxErr = math.Max(maxErr, math.Abs(float64(w[i]-trueW[i])))
		}
		fmt.Printf("%d replicas identical; max |W - W*| = %.4f\n", size, maxErr)
	}
	return nil
}
