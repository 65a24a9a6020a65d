package trainer

import (
	"context"
	"fmt"
	"math"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/dp"
	"github.com/hiercomm/hiercomm/examples/internal/mlp"
)

// Accuracy is the fraction of the test set the net classifies right with
// parameters p: each rank predicts its share of the test images
// (dp.Shard) and one AllReduce adds up the counts, so every rank returns the same figure.
func Accuracy(ctx context.Context, c comm.Communicator, net *mlp.Net, p mlp.Params, d *Data) (float64, error) {
	n, rank, size := d.Test.Len(), c.Rank(), c.Size()
	lo, hi := dp.Shard(n, rank, size)
	counts := []int64{0}
	if hi > lo {
		pred, err := net.Predict(p, d.Test.Images[lo*net.Inputs():hi*net.Inputs()])
		if err != nil {
			return 0, err
		}
		for i, c := range pred {
			if c == int(d.Test.Labels[lo+i]) {
				counts[0]++
			}
		}
	}
	if err := c.AllReduce(ctx, comm.Host(counts), comm.Host(counts), comm.Sum); err != nil {
		return 0, fmt.Errorf("adding up the test counts: %w", err)
	}
	return float64(counts[0]) / float64(n), nil
}

// Reference trains the net as one process would on the same global
// batches: the same initial weights, the whole batch of every step in one
// pass, the optimizer on the whole vector. It returns the loss of each of
// the first steps steps and the parameters after them.
func Reference(cfg Config, d *Data, steps int) ([]float64, []float32, error) {
	net, err := mlp.New(cfg.Sizes(), cfg.Batch)
	if err != nil {
		return nil, nil, err
	}
	opt, err := mlp.NewOptimizer(cfg.Opt, cfg.LR)
	if err != nil {
		return nil, nil, err
	}
	p, g := make([]float32, net.NumParams()), make([]float32, net.NumParams())
	net.Init(p, cfg.Seed)
	state := make([][]float32, opt.Slots())
	for i := range state {
		state[i] = make([]float32, len(p))
	}
	flat := mlp.Flat{Net: net, P: p, G: g}
	x, y := make([]float32, cfg.Batch*net.Inputs()), make([]uint8, cfg.Batch)
	var losses []float64
	for s := range d.Batches(0, 1) {
		if s.T == steps {
			break
		}
		d.Train.Batch(s.Idx, x, y)
		if _, err := net.Forward(flat, x, len(s.Idx)); err != nil {
			return nil, nil, err
		}
		loss, err := net.Backward(flat, y)
		if err != nil {
			return nil, nil, err
		}
		opt.Step(s.T+1, p, g, state)
		losses = append(losses, loss)
	}
	return losses, p, nil
}

// Compare is how far a run's losses and parameters are from a reference
// run's: the largest difference of a step's loss, and of a parameter.
func Compare(losses, refLosses []float64, p, refP []float32) (lossDiff, paramDiff float64) {
	for i := range min(len(losses), len(refLosses)) {
		lossDiff = math.Max(lossDiff, math.Abs(losses[i]-refLosses[i]))
	}
	for i := range min(len(p), len(refP)) {
		paramDiff = math.Max(paramDiff, math.Abs(float64(p[i]-refP[i])))
	}
	return lossDiff, paramDiff
}
