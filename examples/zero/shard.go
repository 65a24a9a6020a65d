package main

import (
	"context"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/examples/internal/mlp"
)

// The shard layout. Each layer's parameters (weights then biases, n_l
// elements) are cut into size equal chunks of c_l = ⌈n_l/size⌉ elements,
// the last padded with zeros, and rank r owns chunk r of every layer:
// exactly the chunk a ReduceScatter of the padded layer leaves on rank r,
// and the block rank r contributes to an AllGather of it. A rank's shard
// is its chunks, layer after layer: about 1/size of the model, however
// uneven the layers are (here the first holds 73% of the parameters).
type layout struct {
	net   *mlp.Net
	rank  int
	size  int
	chunk []int // c_l
	soff  []int // where layer l's chunk starts in the shard; soff[L] the shard's length
}

func newLayout(net *mlp.Net, rank, size int) *layout {
	s := &layout{net: net, rank: rank, size: size, soff: []int{0}}
	for l := range net.Layers() {
		_, n := net.Layout(l)
		c := (n + size - 1) / size
		s.chunk = append(s.chunk, c)
		s.soff = append(s.soff, s.soff[l]+c)
	}
	return s
}

// shardLen is the length of a rank's shard.
func (s *layout) shardLen() int { return s.soff[len(s.soff)-1] }

// widest is the longest padded layer (size chunks): the scratch a gather
// or a scatter of one layer needs.
func (s *layout) widest() int {
	w := 0
	for _, c := range s.chunk {
		w = max(w, c*s.size)
	}
	return w
}

// owned is the part of layer l that this rank owns, as elements
// [lo, hi) of the layer (hi−lo ≤ c_l: the padding is nobody's).
func (s *layout) owned(l int) (lo, hi int) {
	_, n := s.net.Layout(l)
	lo = min(n, s.rank*s.chunk[l])
	return lo, min(n, lo+s.chunk[l])
}

// ofShard is layer l's chunk of a shard vector.
func (s *layout) ofShard(v []float32, l int) []float32 { return v[s.soff[l]:s.soff[l+1]] }

// gatherLayer fills full (the padded layer, size·c_l elements) with every
// rank's chunk of layer l from shard: one AllGather.
func (s *layout) gatherLayer(ctx context.Context, c comm.Communicator, shard, full []float32, l int) error {
	if err := c.AllGather(ctx, comm.Host(s.ofShard(shard, l)), comm.Host(full[:s.size*s.chunk[l]])); err != nil {
		return fmt.Errorf("AllGather of layer %d's parameters: %w", l, err)
	}
	return nil
}

// scatterLayer leaves in layer l's chunk of shard the mean over the ranks
// of their full gradients of layer l (full, padded with zeros): one
// ReduceScatter, half the traffic of the AllReduce it replaces.
func (s *layout) scatterLayer(ctx context.Context, c comm.Communicator, full, shard []float32, l int) error {
	if err := c.ReduceScatter(ctx, comm.Host(full[:s.size*s.chunk[l]]), comm.Host(s.ofShard(shard, l)), comm.Avg); err != nil {
		return fmt.Errorf("ReduceScatter of layer %d's gradient: %w", l, err)
	}
	return nil
}

// gathered is mlp.Params for ZeRO-3: no layer's parameters live on a rank
// but its own chunks (shardP); each use of a layer gathers it into one
// scratch buffer and lets it go after (Release), and each layer's
// gradient is written into another scratch buffer and reduce-scattered
// into the rank's gradient chunk (shardG) as soon as it is ready.
type gathered struct {
	ctx            context.Context
	c              comm.Communicator
	lay            *layout
	shardP, shardG []float32
	full, grad     []float32 // the scratch: one layer's parameters, one layer's gradient
	err            error     // the first collective's failure; the pass's result is then void
}

func (g *gathered) Layer(l int) []float32 {
	_, n := g.lay.net.Layout(l)
	if g.err == nil {
		g.err = g.lay.gatherLayer(g.ctx, g.c, g.shardP, g.full, l)
	}
	return g.full[:n]
}

// Release frees the gathered layer: the next Layer overwrites the scratch.
func (g *gathered) Release(int) {}

func (g *gathered) Grad(l int) []float32 {
	_, n := g.lay.net.Layout(l)
	clear(g.grad[n : g.lay.size*g.lay.chunk[l]]) // the padding reduces to 0
	return g.grad[:n]
}

func (g *gathered) GradReady(l int) {
	if g.err == nil {
		g.err = g.lay.scatterLayer(g.ctx, g.c, g.grad, g.shardG, l)
	}
}

// scattered is mlp.Params for ZeRO-2: the parameters are whole on every
// rank (p), the gradient is not: each layer's is reduce-scattered into the
// rank's chunk as it is ready, from one scratch buffer.
type scattered struct {
	gathered
	p []float32
}

func (s *scattered) Layer(l int) []float32 {
	off, n := s.lay.net.Layout(l)
	return s.p[off : off+n]
}
