package main

import (
	"context"
	"fmt"
	"time"

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
	// With -device: the device memory the stage held per rank, the time
	// its collectives took and its host↔device copies, over its steps.
	devBytes int
	comm     time.Duration
	copies   trainer.Copies
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
// run's global batches. With a Device, the vectors the stage's collectives
// move live in its memory (onDevice says which); the arithmetic reads
// and writes their host copies. With gc, the first steps' reduced
// gradients are checked against one process's (rank 0 says how they
// fared).
func train(ctx context.Context, c comm.Communicator, dev *trainer.Device, cfg trainer.Config, data *trainer.Data, stage int, gc *trainer.GradCheck, say func(string, ...any)) (*result, error) {
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
	s := &stepper{link: &link{ctx: ctx, c: c, lay: lay}, net: net, opt: opt, state: state, stage: stage,
		gc: gc, hc: trainer.Host(c, dev), say: say}
	defer s.free()
	// vec allocates an n-element Vector of the stage (with a device copy
	// under -device); the first failure stays in err, and vec then
	// returns nil, so the allocations below read as a list.
	vec := func(n int) *trainer.Vector {
		if err == nil {
			var v *trainer.Vector
			if v, err = dev.Vector(n); err == nil {
				s.vecs = append(s.vecs, v)
				return v
			}
		}
		return nil
	}
	switch stage {
	case 0, 1:
		s.p, s.g = init, vec(total)
		if err == nil {
			s.params = mlp.Flat{Net: net, P: s.p, G: s.g.Host}
		}
	case 2:
		s.p = init
		sc := &scattered{gathered: gathered{link: s.link, shardG: vec(lay.shardLen()), grad: vec(lay.widest())}, p: s.p}
		s.params, s.sh = sc, &sc.gathered
	case 3:
		g := &gathered{link: s.link, shardP: vec(lay.shardLen()), shardG: vec(lay.shardLen()), full: vec(lay.widest()), grad: vec(lay.widest())}
		if err == nil {
			for l := range net.Layers() {
				off, _ := net.Layout(l)
				lo, hi := lay.owned(l)
				copy(lay.ofShard(g.shardP.Host, l), init[off+lo:off+hi])
			}
			err = g.shardP.Put(0, g.shardP.Len()) // the gathers read the device's
		}
		init = nil // only the shard stays
		s.params, s.sh = g, g
	}
	if stage == 1 || stage == 2 {
		s.full = vec(lay.widest()) // where a layer is gathered
	}
	if err != nil {
		return nil, err
	}
	res := &result{net: net, mem: s.held(), devBytes: dev.Allocated()}
	if want := footprint(net, opt.Slots(), stage, size); res.mem != want {
		return nil, fmt.Errorf("holds %v, but ZeRO's arithmetic says %v", res.mem, want)
	}
	if want := res.mem.onDevice(); dev != nil && res.devBytes != want {
		return nil, fmt.Errorf("holds %d bytes of device memory, but the stage moves %d bytes on the device", res.devBytes, want)
	}
	hc := s.hc
	copies := dev.Copies()
	x, y := make([]float32, per*net.Inputs()), make([]uint8, per)
	lossBuf := []float64{0}
	for st := range data.Batches(rank, size) {
		data.Train.Batch(st.Idx, x, y)
		loss, err := s.step(st.T+1, x, y)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", st.T+1, err)
		}
		lossBuf[0] = loss
		if err := hc.AllReduce(ctx, comm.Host(lossBuf), comm.Host(lossBuf), comm.Avg); err != nil {
			return nil, fmt.Errorf("step %d: averaging the loss: %w", st.T, err)
		}
		res.losses = append(res.losses, lossBuf[0])
	}
	res.comm, res.copies = s.comm, dev.Copies().Sub(copies)
	if stage == 3 { // gather the whole vector once, for the comparison
		s.p = make([]float32, total)
		for l := range net.Layers() {
			off, n := net.Layout(l)
			if err := s.gatherLayer(s.sh.shardP, s.sh.full, l); err != nil {
				return nil, err
			}
			copy(s.p[off:off+n], s.sh.full.Host[:n])
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
	m.params, m.grads = 4*len(s.p), 4*s.g.Len()
	m.scratch = 4 * s.full.Len()
	if s.sh != nil {
		m.params += 4 * s.sh.shardP.Len()
		m.grads += 4 * s.sh.shardG.Len()
		m.scratch += 4 * (s.sh.full.Len() + s.sh.grad.Len())
	}
	return m
}

// onDevice is how much of m a -device run keeps in device memory: what
// the collectives move — the gradient (whole or its shard), stage 3's
// parameter shard, the scratch — and not the optimizer state, which
// only the host's arithmetic reads, nor stages 0–2's whole parameters,
// which no collective reads (stages 1–2 gather into the scratch).
func (m memory) onDevice() int {
	b := m.grads + m.scratch
	if m.stage == 3 {
		b += m.params
	}
	return b
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
	*link
	net    *mlp.Net
	opt    mlp.Optimizer
	state  [][]float32 // whole (stage 0) or this rank's shard
	stage  int
	params mlp.Params
	p      []float32         // the whole parameters (stages 0–2)
	g      *trainer.Vector   // the whole gradient (stages 0–1)
	sh     *gathered         // stages 2–3: the gradient shard (and 3's parameter shard)
	full   *trainer.Vector   // stages 1–2: scratch to gather a layer into
	vecs   []*trainer.Vector // every Vector above, to free
	// The gradient check (check.go): nil for none; hc carries its host
	// values, gatherBuf is where rank 0 gathers the shards.
	gc        *trainer.GradCheck
	hc        comm.Communicator
	say       func(string, ...any)
	gatherBuf []float32
}

// free releases the stage's device memory.
func (s *stepper) free() {
	for _, v := range s.vecs {
		v.Free()
	}
}

// allReduce averages the whole gradient over the ranks (stages 0–1).
func (s *stepper) allReduce() error {
	if err := s.g.Put(0, s.g.Len()); err != nil {
		return err
	}
	g := s.g.Buf(0, s.g.Len())
	if err := s.timed(func() error { return s.c.AllReduce(s.ctx, g, g, comm.Avg) }); err != nil {
		return fmt.Errorf("AllReduce of the gradient: %w", err)
	}
	return s.g.Get(0, s.g.Len())
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
	if s.stage <= 1 {
		if err := s.allReduce(); err != nil {
			return 0, err
		}
	}
	if err := s.checkGrad(t - 1); err != nil {
		return 0, err
	}
	if s.stage == 0 {
		s.opt.Step(t, s.p, s.g.Host, s.state)
		return loss, nil
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
			s.opt.Step(t, s.p[off+lo:off+hi], s.g.Host[off+lo:off+hi], st)
		case 2:
			s.opt.Step(t, s.p[off+lo:off+hi], s.lay.ofShard(s.sh.shardG.Host, l)[:hi-lo], st)
		case 3:
			s.opt.Step(t, s.lay.ofShard(s.sh.shardP.Host, l)[:hi-lo], s.lay.ofShard(s.sh.shardG.Host, l)[:hi-lo], st)
		}
	}
	if s.stage == 3 {
		// The next forward gathers what it needs, from the device's shard.
		return loss, s.sh.shardP.Put(0, s.sh.shardP.Len())
	}
	// Stages 1–2: every rank gets every rank's updated part, layer by layer.
	for l := range s.net.Layers() {
		off, n := s.net.Layout(l)
		lo, hi := s.lay.owned(l)
		chunk, at := s.lay.chunk[l], s.lay.rank*s.lay.chunk[l]
		mine := s.full.Host[at : at+chunk]
		clear(mine[copy(mine, s.p[off+lo:off+hi]):])
		if err := s.full.Put(at, chunk); err != nil {
			return 0, err
		}
		send, recv := s.full.Buf(at, chunk), s.full.Buf(0, s.lay.size*chunk)
		if err := s.timed(func() error { return s.c.AllGather(s.ctx, send, recv) }); err != nil {
			return 0, fmt.Errorf("AllGather of layer %d's parameters: %w", l, err)
		}
		if err := s.full.Get(0, n); err != nil {
			return 0, err
		}
		copy(s.p[off:off+n], s.full.Host[:n])
	}
	return loss, nil
}
