package main

import (
	"context"
	"fmt"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/examples/internal/mlp"
	"github.com/hiercomm/hiercomm/examples/internal/trainer"
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

// link is how a stage's collectives run: on c (the World: device buffers
// on a GPU world), over vectors cut as lay says. Each collective reads
// and writes the vectors' device copies (with -device; their host slices
// otherwise): what the arithmetic wrote is put there before it, and what
// it left is got back after it. The time spent in the collectives
// themselves is added up apart from the copies' (which trainer.Device
// counts).
type link struct {
	ctx   context.Context
	c     comm.Communicator
	lay   *layout
	comm  time.Duration // in the collectives, copies excluded
	stale []float32     // faultStale's previous chunk (fault.go)
}

// timed runs one collective and adds its time to comm.
func (k *link) timed(f func() error) error {
	start := time.Now()
	err := f()
	k.comm += time.Since(start)
	return err
}

// gatherLayer fills full (the padded layer, size·c_l elements) with every
// rank's chunk of layer l from shard, one AllGather, and gets layer l's
// n_l elements back into full's host slice. The chunk must be on the
// device already (shard is put after each update).
func (k *link) gatherLayer(shard, full *trainer.Vector, l int) error {
	s := k.lay
	send, recv := shard.Buf(s.soff[l], s.chunk[l]), full.Buf(0, s.size*s.chunk[l])
	if err := k.timed(func() error { return k.c.AllGather(k.ctx, send, recv) }); err != nil {
		return fmt.Errorf("AllGather of layer %d's parameters: %w", l, err)
	}
	_, n := s.net.Layout(l)
	return full.Get(0, n)
}

// scatterLayer leaves in layer l's chunk of shard the mean over the ranks
// of their full gradients of layer l (full, padded with zeros): the
// padded layer put on the device, one ReduceScatter (half the traffic of
// the AllReduce it replaces), the chunk got back.
func (k *link) scatterLayer(full, shard *trainer.Vector, l int) error {
	s := k.lay
	padded := s.size * s.chunk[l]
	if k.beforeScatter(full.Host[:padded], s.ofShard(shard.Host, l), l, s.chunk[l]) {
		return nil
	}
	if err := full.Put(0, padded); err != nil {
		return err
	}
	send, recv := full.Buf(0, padded), shard.Buf(s.soff[l], s.chunk[l])
	if err := k.timed(func() error { return k.c.ReduceScatter(k.ctx, send, recv, scatterOp()) }); err != nil {
		return fmt.Errorf("ReduceScatter of layer %d's gradient: %w", l, err)
	}
	if err := shard.Get(s.soff[l], s.chunk[l]); err != nil {
		return err
	}
	k.afterScatter(s.ofShard(shard.Host, l), l)
	return nil
}

// gathered is mlp.Params for ZeRO-3: no layer's parameters live on a rank
// but its own chunks (shardP); each use of a layer gathers it into one
// scratch buffer and lets it go after (Release), and each layer's
// gradient is written into another scratch buffer and reduce-scattered
// into the rank's gradient chunk (shardG) as soon as it is ready.
type gathered struct {
	*link
	shardP, shardG *trainer.Vector
	full, grad     *trainer.Vector // the scratch: one layer's parameters, one layer's gradient
	err            error           // the first collective's failure; the pass's result is then void
}

func (g *gathered) Layer(l int) []float32 {
	_, n := g.lay.net.Layout(l)
	if g.err == nil {
		g.err = g.gatherLayer(g.shardP, g.full, l)
	}
	return g.full.Host[:n]
}

// Release frees the gathered layer: the next Layer overwrites the scratch.
func (g *gathered) Release(int) {}

func (g *gathered) Grad(l int) []float32 {
	_, n := g.lay.net.Layout(l)
	clear(g.grad.Host[n : g.lay.size*g.lay.chunk[l]]) // the padding reduces to 0
	return g.grad.Host[:n]
}

func (g *gathered) GradReady(l int) {
	if g.err == nil {
		g.err = g.scatterLayer(g.grad, g.shardG, l)
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
