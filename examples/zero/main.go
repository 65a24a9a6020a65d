// Command zero trains with ZeRO-style sharding across local processes: the
// optimizer state and the master copy of the parameters are split into one
// shard per rank. Each step every rank computes full gradients on its data,
// a ReduceScatter leaves rank r with the summed gradient of shard r only
// (half the traffic of an AllReduce), rank r updates its shard with Adam,
// and an AllGather brings every rank the whole updated parameter vector.
//
//	go run ./examples/zero -np 4
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/examples/internal/launch"
	"github.com/hiercomm/hiercomm/nexar"
)

func main() {
	np := flag.Int("np", 4, "number of ranks (processes)")
	steps := flag.Int("steps", 300, "training steps")
	network := flag.String("network", "quic", "quic or tcp")
	flag.Parse()
	launch.Main(*np, *network, func() error { return train(*steps) })
}

// The toy objective: every rank r pulls the parameters towards its own
// target t_r; the optimum is the mean of the targets.
const params = 1 << 12

func train(steps int) error {
	ctx := context.Background()
	c, err := nexar.JoinLocal(ctx, os.Getenv, nexar.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	rank, size := c.Rank(), c.Size()
	// Like real ZeRO, pad the flat parameter vector to a multiple of the
	// world size; the padding takes part in nothing but the layout.
	shard := (params + size - 1) / size
	padded := shard * size

	target := make([]float32, padded)
	for i := range params {
		target[i] = float32((rank+1)*(i%7)) / 7
	}
	p := make([]float32, padded)    // full parameters (gathered every step)
	grad := make([]float32, padded) // this rank's full gradient
	g := make([]float32, shard)     // the reduced gradient of my shard
	m := make([]float32, shard)     // Adam state: my shard only
	v := make([]float32, shard)
	const lr, b1, b2, eps = 0.05, 0.9, 0.999, 1e-8
	for step := 1; step <= steps; step++ {
		for i := range grad {
			grad[i] = 2 * (p[i] - target[i]) / float32(size)
		}
		if err := c.ReduceScatter(ctx, comm.Host(grad), comm.Host(g), comm.Sum); err != nil {
			return err
		}
		mine := p[rank*shard : (rank+1)*shard]
		for i := range g {
			m[i] = b1*m[i] + (1-b1)*g[i]
			v[i] = b2*v[i] + (1-b2)*g[i]*g[i]
			mh := m[i] / float32(1-math.Pow(b1, float64(step)))
			vh := v[i] / float32(1-math.Pow(b2, float64(step)))
			mine[i] -= lr * mh / (float32(math.Sqrt(float64(vh))) + eps)
		}
		// In place: my shard is block rank of p.
		if err := c.AllGather(ctx, comm.Host(mine), comm.Host(p)); err != nil {
			return err
		}
	}
	// The optimum is the mean target: (size+1)/2 · (i%7)/7.
	var worst float64
	for i, x := range p[:params] {
		want := float64(size+1) / 2 * float64(i%7) / 7
		worst = math.Max(worst, math.Abs(float64(x)-want))
	}
	if rank == 0 {
		fmt.Printf("%d ranks, %d parameters in %d shards; max distance to the optimum %.4f\n", size, params, size, worst)
	}
	if worst > 0.05 {
		return fmt.Errorf("did not converge: max distance %.4f", worst)
	}
	return nil
}
