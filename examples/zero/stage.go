package main

import (
	"context"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/examples/internal/mlp"
	"github.com/hiercomm/hiercomm/examples/internal/trainer"
)

// result is what one stage's run leaves: the global loss of every step,
// the whole parameter vector at the end (gathered, for stage 3), and the
// memory it held per rank.
type result struct {
	net    *mlp.Net
	losses []float64
	p      []float32
	mem    memory
}

// memory is what a rank holds for the model, in bytes: what it keeps from
// step to step (parameters, gradients, optimizer state: ZeRO's 4+4+8
// bytes per parameter with Adam, unsharded) and the scratch a step needs
// on top for one layer at a time.
type memory struct {
	stage, size          int
	params, grads, optim int
	scratch              int // stage 1: one padded layer gathered; 2–3: and one layer's gradient
}

func (m memory) persistent() int { return m.params + m.grads + m.optim }

func (m memory) String() string {
	s := fmt.Sprintf("memory per rank (N=%d): parameters %s + gradients %s + optimizer state %s = %s (%d bytes)",
		m.size, mib(m.params), mib(m.grads), mib(m.optim), mib(m.persistent()), m.persistent())
	switch {
	case m.stage == 1:
		s += fmt.Sprintf(", and %s of scratch (one padded layer's gathered parameters)", mib(m.scratch))
	case m.stage > 1:
		s += fmt.Sprintf(", and %s of scratch (one padded layer's gradient and its gathered parameters)", mib(m.scratch))
	}
	return s
}

// train runs one stage from the configured initial weights over the
// run's global batches.
func train(ctx context.Context, c comm.Communicator, cfg trainer.Config, data *trainer.Data, stage int) (*result, error) {
	rank, size := c.Rank(), c.Size()
	per := cfg.Batch / size
	net, err := mlp.New(cfg.Sizes(), per)
	if err != nil {
		return nil, err
	}
	opt, err := mlp.NewOptimizer(cfg.Opt, cfg.LR)
	if err != nil {
		return nil, err
	}
	lay := newLayout(net, rank, size)
	total, shard := net.NumParams(), lay.shardLen()
	if stage == 0 {
		shard = total // the optimizer state is whole
	}
	state := make([][]float32, opt.Slots())
	for i := range state {
		state[i] = make([]float32, shard)
	}
	// Every rank draws the same initial weights; stage 3 keeps its chunks.
	init := make([]float32, total)
	net.Init(init, cfg.Seed)
	s := &stepper{ctx: ctx, c: c, net: net, lay: lay, opt: opt, state: state, stage: stage}
	switch stage {
	case 0, 1:
		s.p, s.g = init, make([]float32, total)
		s.params = mlp.Flat{Net: net, P: s.p, G: s.g}
	case 2:
		s.p = init
		sc := &scattered{gathered: gathered{ctx: ctx, c: c, lay: lay, shardG: make([]float32, lay.shardLen()), grad: make([]float32, lay.widest())}, p: s.p}
		s.params, s.sh = sc, &sc.gathered
	case 3:
		g := &gathered{ctx: ctx, c: c, lay: lay, shardP: make([]float32, lay.shardLen()), shardG: make([]float32, lay.shardLen()),
			full: make([]float32, lay.widest()), grad: make([]float32, lay.widest())}
		for l := range net.Layers() {
			off, _ := net.Layout(l)
			lo, hi := lay.owned(l)
			copy(lay.ofShard(g.shardP, l), init[off+lo:off+hi])
		}
		init = nil // only the shard stays
		s.params, s.sh = g, g
	}
	if stage == 1 || stage == 2 {
		s.full = make([]float32, lay.widest()) // where a layer is gathered
	}
	res := &result{net: net, mem: s.held()}
	if want := footprint(net, opt.Slots(), stage, size); res.mem != want {
		return nil, fmt.Errorf("holds %v, but ZeRO's arithmetic says %v", res.mem, want)
	}
	x, y := make([]float32, per*net.Inputs()), make([]uint8, per)
	lossBuf := []float64{0}
	for st := range data.Batches(rank, size) {
		data.Train.Batch(st.Idx, x, y)
		loss, err := s.step(st.T+1, x, y)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", st.T, err)
		}
		lossBuf[0] = loss
		if err := c.AllReduce(ctx, comm.Host(lossBuf), comm.Host(lossBuf), comm.Avg); err != nil {
			return nil, fmt.Errorf("step %d: averaging the loss: %w", st.T, err)
		}
		res.losses = append(res.losses, lossBuf[0])
	}
	if stage == 3 { // gather the whole vector once, for the comparison
		s.p = make([]float32, total)
		for l := range net.Layers() {
			off, n := net.Layout(l)
			if err := lay.gatherLayer(ctx, c, s.sh.shardP, s.sh.full, l); err != nil {
				return nil, err
			}
			copy(s.p[off:off+n], s.sh.full[:n])
		}
	}
	res.p = s.p
	return res, nil
}

// held is what the stage's stepper holds for the model, measured on the
// slices it keeps.
func (s *stepper) held() memory {
	m := memory{stage: s.stage, size: s.lay.size}
	for _, v := range s.state {
		m.optim += 4 * len(v)
	}
	m.params, m.grads = 4*len(s.p), 4*len(s.g)
	m.scratch = 4 * len(s.full)
	if s.sh != nil {
		m.params += 4 * len(s.sh.shardP)
		m.grads += 4 * len(s.sh.shardG)
		m.scratch += 4 * (len(s.sh.full) + len(s.sh.grad))
	}
	return m
}

// footprint is what a rank of size ranks holds for net at stage with an
// optimizer of slots state vectors, by ZeRO's arithmetic: per parameter,
// 4 bytes of parameter, 4 of gradient and 4·slots of state, each kept
// whole or divided by size (to the padding of each layer's chunks) as the
// stage says, plus one padded layer of scratch per gathered or scattered
// buffer.
func footprint(net *mlp.Net, slots, stage, size int) memory {
	lay := newLayout(net, 0, size)
	whole, shard := 4*net.NumParams(), 4*lay.shardLen()
	m := memory{stage: stage, size: size, params: whole, grads: whole, optim: slots * whole}
	switch stage {
	case 1:
		m.optim = slots * shard
		m.scratch = 4 * lay.widest()
	case 2:
		m.grads, m.optim = shard, slots*shard
		m.scratch = 2 * 4 * lay.widest()
	case 3:
		m.params, m.grads, m.optim = shard, shard, slots*shard
		m.scratch = 2 * 4 * lay.widest()
	}
	return m
}

// stepper makes one training step of a stage.
type stepper struct {
	ctx    context.Context
	c      comm.Communicator
	net    *mlp.Net
	lay    *layout
	opt    mlp.Optimizer
	state  [][]float32 // whole (stage 0) or this rank's shard
	stage  int
	params mlp.Params
	p, g   []float32 // the whole parameters (stages 0–2) and gradient (0–1)
	sh     *gathered // stages 2–3: the gradient shard (and 3's parameter shard)
	full   []float32 // stages 1–2: scratch to gather a layer into
}

func (s *stepper) step(t int, x []float32, y []uint8) (float64, error) {
	if _, err := s.net.Forward(s.params, x, len(y)); err != nil {
		return 0, err
	}
	loss, err := s.net.Backward(s.params, y)
	if err != nil {
		return 0, err
	}
	if s.sh != nil && s.sh.err != nil {
		return 0, s.sh.err
	}
	switch s.stage {
	case 0:
		if err := s.c.AllReduce(s.ctx, comm.Host(s.g), comm.Host(s.g), comm.Avg); err != nil {
			return 0, fmt.Errorf("AllReduce of the gradient: %w", err)
		}
		s.opt.Step(t, s.p, s.g, s.state)
		return loss, nil
	case 1:
		if err := s.c.AllReduce(s.ctx, comm.Host(s.g), comm.Host(s.g), comm.Avg); err != nil {
			return 0, fmt.Errorf("AllReduce of the gradient: %w", err)
		}
	}
	// Update this rank's part of each layer with its optimizer state.
	for l := range s.net.Layers() {
		off, _ := s.net.Layout(l)
		lo, hi := s.lay.owned(l)
		st := make([][]float32, len(s.state))
		for i, v := range s.state {
			st[i] = s.lay.ofShard(v, l)[:hi-lo]
		}
		switch s.stage {
		case 1:
			s.opt.Step(t, s.p[off+lo:off+hi], s.g[off+lo:off+hi], st)
		case 2:
			s.opt.Step(t, s.p[off+lo:off+hi], s.lay.ofShard(s.sh.shardG, l)[:hi-lo], st)
		case 3:
			s.opt.Step(t, s.lay.ofShard(s.sh.shardP, l)[:hi-lo], s.lay.ofShard(s.sh.shardG, l)[:hi-lo], st)
		}
	}
	if s.stage == 3 {
		return loss, nil // the next forward gathers what it needs
	}
	// Stages 1–2: every rank gets every rank's updated part, layer by layer.
	for l := range s.net.Layers() {
		off, n := s.net.Layout(l)
		lo, hi := s.lay.owned(l)
		chunk := s.lay.chunk[l]
		mine := s.full[s.lay.rank*chunk : (s.lay.rank+1)*chunk]
		clear(mine[copy(mine, s.p[off+lo:off+hi]):])
		if err := s.c.AllGather(s.ctx, comm.Host(mine), comm.Host(s.full[:s.lay.size*chunk])); err != nil {
			return 0, fmt.Errorf("AllGather of layer %d's parameters: %w", l, err)
		}
		copy(s.p[off:off+n], s.full[:n])
	}
	return loss, nil
}
