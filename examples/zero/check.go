package main

import (
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/examples/internal/trainer"
)

// checked says whether a stage runs the gradient check when stages run:
// stages 0 and 2, whose reductions differ (AllReduce, ReduceScatter), and
// 1 or 3 where the stage it must be bitwise equal to did not run.
func checked(stage int, stages []int) bool {
	if stage%2 == 0 {
		return true
	}
	for _, s := range stages {
		if s == stage-1 {
			return false
		}
	}
	return true
}

// checkGrad is step t's gradient check (trainer.GradCheck), after the
// reduction and before the update: the averaged gradient whole on every
// rank in stages 0–1; in 2–3 each rank's shard of it, gathered to rank 0
// (and in 3 the weights' shards likewise: no rank holds them whole).
func (s *stepper) checkGrad(t int) error {
	if s.gc == nil || t >= s.gc.Steps() {
		return nil
	}
	p, g := s.p, []float32(nil)
	if s.sh == nil {
		g = s.g.Host
	} else {
		var err error
		if g, err = s.whole(s.sh.shardG.Host); err != nil {
			return err
		}
		if s.stage == 3 {
			if p, err = s.whole(s.sh.shardP.Host); err != nil {
				return err
			}
		}
	}
	if err := s.gc.Check(s.ctx, s.hc, t, p, g); err != nil {
		return err
	}
	if t == s.gc.Steps()-1 && s.lay.rank == 0 {
		s.say("stage %d: %s", s.stage, s.gc.Summary(s.lay.size))
	}
	return nil
}

// whole gathers every rank's shard (the host copy) to rank 0 and returns
// there the vector they are the shards of, in the flat layout (nil on
// the other ranks).
func (s *stepper) whole(shard []float32) ([]float32, error) {
	lay := s.lay
	n := lay.shardLen()
	if s.gatherBuf == nil {
		s.gatherBuf = make([]float32, lay.size*n)
	}
	if err := s.hc.Gather(s.ctx, comm.Host(shard), comm.Host(s.gatherBuf), 0); err != nil {
		return nil, fmt.Errorf("gathering the shards for the gradient check: %w", err)
	}
	if lay.rank != 0 {
		return nil, nil
	}
	out := make([]float32, s.net.NumParams())
	for l := range s.net.Layers() {
		off, size := s.net.Layout(l)
		c := lay.chunk[l]
		for k := range size { // element k of layer l: rank k/c's chunk, at k%c
			out[off+k] = s.gatherBuf[(k/c)*n+lay.soff[l]+k%c]
		}
	}
	return out, nil
}

// newCheck is the gradient check of a stage's first steps steps (nil for
// none).
func newCheck(cfg trainer.Config, data *trainer.Data, steps int) *trainer.GradCheck {
	if steps == 0 {
		return nil
	}
	return trainer.NewGradCheck(cfg, data, min(steps, data.TotalSteps()))
}
