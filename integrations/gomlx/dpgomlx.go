// Package dpgomlx makes a GoMLX training loop data-parallel over a hiercomm
// communicator, in two lines:
//
//	opt := dpgomlx.Wrap(world, optimizers.Adam().Done()) // the optimizer the Trainer gets
//	opt.Attach(loop)                                      // loop := train.NewLoop(trainer)
//
// GoMLX compiles forward, backward and the optimizer's update into one
// graph, with no collective in it, so the wrapper cuts the step in two.
// The Trainer's graph runs the wrapper's UpdateGraph, which computes the
// gradients (Context.BuildTrainableVariablesGradientsGraph) and stores each
// in a non-trainable variable under the scope GradScope; the hook Attach
// adds (train.Loop.OnStep, priority HookPriority, before any other hook)
// averages them over the ranks with a dp.Reducer and then runs a second
// compiled graph that hands them to the wrapped optimizer's
// UpdateGraphWithGradients (train.OptimizeWithGradients: Adam and SGD
// implement it). Every rank then applies the same averaged gradient to the
// same weights, and the replicas stay bitwise identical.
//
// Memory. The AllReduce runs on the gradient tensors' own memory. A train
// step's outputs are on-device tensors with no local copy; on a backend
// with shared buffers (backends.Backend.HasSharedBuffers: the pure-Go
// simplego backend) the device buffer is host memory, and
// tensors.Tensor.ConstFlatData hands over that buffer itself
// (backends.Backend.BufferData): nothing is copied. GoMLX says not to
// change that slice, because a local copy would go out of step with the
// device's; here there is no local copy, and nothing else holds the tensor
// between the hook's AllReduce and the update graph that reads it. That
// writing through it is safe is our reading of GoMLX v0.26.0's code, not
// its promise. Any other tensor (an XLA backend's) goes through
// MutableFlatData: a copy to the host when it has none there, and one back
// to the device when the update graph runs; Stats counts them. GoMLX gives
// each step's gradients new buffers, so the dp.Reducer is made again on
// the new memory when it moved (Stats.Rebinds); with a bucket per gradient
// (the default) its buckets are in place and remaking it lays out no
// memory.
//
// Identical replicas. Attach gives the Context a fixed initializer seed
// (context.ParamInitialSeed) when it has none, so every rank draws the
// same initial weights; and the first step, once the variables exist
// (GoMLX creates them while building the first graph), broadcasts rank 0's
// trainable variables before the first update, so replicas are identical
// even when the seeds differ. Identical checks them (dp.Identical).
package dpgomlx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	gctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/dp"
)

// GradScope is the absolute scope of the variables that hold the step's
// gradients: the gradient of the trainable variable /a/b is /hiercomm_grads/a/b.
const GradScope = "/hiercomm_grads"

// HookPriority is the priority of the OnStep hook Attach adds: lower runs
// first, so the update is applied before any other hook sees the step.
const HookPriority train.Priority = -1000

// DefaultSeed is the initializer seed Attach sets when the Context has none.
const DefaultSeed = 42

// Optimizer is an optimizers.Interface that trains data-parallel: see the
// package doc. It is one rank's; every rank makes its own with the same
// optimizer settings.
type Optimizer struct {
	c   comm.Communicator
	opt train.OptimizeWithGradients
	cl  optimizers.Interface
	err error

	// BucketBytes is the dp.Reducer's bucket cap (dp.Options.BucketBytes);
	// 0 is 1: a bucket per gradient, reduced in place in its tensor with no
	// packing copy. Set it before the first step.
	BucketBytes int

	vars, grads []*gctx.Variable // the trainable variables and their gradients, in the gradients' order
	lossDType   dtypes.DType

	backend backends.Backend
	update  *gctx.Exec
	red     *dp.Reducer
	bufs    []comm.Buffer // what red was made on
	stats   Stats
	started bool
}

// Stats is what the hook did over the steps so far.
type Stats struct {
	Steps int
	// AllReduce is the time spent averaging the gradients (taking the
	// tensors' memory included), Update the time of the update graph.
	AllReduce, Update time.Duration
	// Copies is the number of tensor copies between device and host memory
	// the hook caused (two per gradient per step on a backend without
	// shared buffers: to the host before the AllReduce, back for the
	// update), CopiedBytes their bytes; both 0 on simplego.
	Copies, CopiedBytes int64
	// Rebinds is the number of steps whose gradient tensors were not the
	// memory the Reducer was made on, so it was made again (its buckets'
	// layout is the same; only the memory moved).
	Rebinds int
}

func (s Stats) String() string {
	if s.Steps == 0 {
		return "no steps"
	}
	n := time.Duration(s.Steps)
	return fmt.Sprintf("%d steps: AllReduce %v/step, update graph %v/step, %d copies (%d bytes), %d rebinds",
		s.Steps, (s.AllReduce / n).Round(time.Microsecond), (s.Update / n).Round(time.Microsecond), s.Copies, s.CopiedBytes, s.Rebinds)
}

// Wrap returns opt made data-parallel over c. opt must implement
// train.OptimizeWithGradients (optimizers.Adam and
// optimizers.StochasticGradientDescent do); if it does not, the first
// graph build panics saying so, as GoMLX's graph builders do.
func Wrap(c comm.Communicator, opt optimizers.Interface) *Optimizer {
	o := &Optimizer{c: c, cl: opt}
	if g, ok := opt.(train.OptimizeWithGradients); ok {
		o.opt = g
	} else {
		o.err = fmt.Errorf("dpgomlx: optimizer %T does not implement train.OptimizeWithGradients (Adam and SGD do)", opt)
	}
	return o
}

// UpdateGraph implements optimizers.Interface: it stores the gradients of
// loss in the variables under GradScope, and updates nothing (the hook
// does, after the AllReduce).
func (o *Optimizer) UpdateGraph(ctx *gctx.Context, g *graph.Graph, loss *graph.Node) {
	if o.err != nil {
		panic(o.err)
	}
	grads := ctx.BuildTrainableVariablesGradientsGraph(loss)
	var vars, gvars []*gctx.Variable
	for v := range ctx.IterVariables() { // the order of BuildTrainableVariablesGradientsGraph's
		if !v.Trainable || !v.InUseByGraph(g) {
			continue
		}
		gv := ctx.InAbsPath(GradScope+v.Scope()).Checked(false).WithInitializer(initializers.Zero).
			VariableWithShape(v.Name(), v.Shape()).SetTrainable(false)
		gv.SetValueGraph(grads[len(vars)])
		vars, gvars = append(vars, v), append(gvars, gv)
	}
	if len(vars) != len(grads) {
		panic(fmt.Sprintf("dpgomlx: %d gradients for %d trainable variables", len(grads), len(vars)))
	}
	o.vars, o.grads, o.lossDType = vars, gvars, loss.DType()
}

// Clear implements optimizers.Interface: the wrapped optimizer's Clear.
func (o *Optimizer) Clear(ctx *gctx.Context) error { return o.cl.Clear(ctx) }

// Attach hooks o into loop, whose Trainer must have been made with o: it
// sets the Context's initializer seed to DefaultSeed unless it has one, and
// adds the OnStep hook that averages the gradients and applies them.
func (o *Optimizer) Attach(loop *train.Loop) {
	ctx := loop.Trainer.Context()
	if _, found := ctx.GetParam(gctx.ParamInitialSeed); !found {
		ctx.SetParam(gctx.ParamInitialSeed, int64(DefaultSeed))
	}
	loop.OnStep("hiercomm AllReduce and update", HookPriority, func(loop *train.Loop, _ []*tensors.Tensor) error {
		return o.Step(context.Background(), loop.Trainer.Context())
	})
}

// Step averages the gradients of the last train step over the ranks and
// applies them with the wrapped optimizer; the hook Attach adds calls it
// after each step. ctx's variables are those the Trainer trains.
func (o *Optimizer) Step(ctx context.Context, vctx *gctx.Context) error {
	if len(o.grads) == 0 {
		return errors.New("dpgomlx: Step before a train step built the graph (was the Trainer made with this Optimizer?)")
	}
	if !o.started {
		// The variables exist now: give every rank rank 0's weights
		// before the first update.
		if err := o.broadcastWeights(ctx); err != nil {
			return err
		}
		o.started = true
	}
	t0 := time.Now()
	if o.backend == nil {
		t, err := o.grads[0].Value()
		if err == nil {
			o.backend, err = t.Backend()
		}
		if err != nil {
			return fmt.Errorf("dpgomlx: the gradients' backend: %w", err)
		}
	}
	bufs := make([]comm.Buffer, len(o.grads))
	for i, gv := range o.grads {
		t, err := gv.Value()
		if err != nil {
			return fmt.Errorf("dpgomlx: gradient %s: %w", gv.ScopeAndName(), err)
		}
		if bufs[i], err = o.view(t); err != nil {
			return fmt.Errorf("dpgomlx: gradient %s: %w", gv.ScopeAndName(), err)
		}
	}
	if !sameMemory(bufs, o.bufs) {
		if o.red != nil {
			o.stats.Rebinds++
		}
		bb := o.BucketBytes
		if bb == 0 {
			bb = 1
		}
		red, err := dp.NewReducer(o.c, bufs, dp.Options{BucketBytes: bb})
		if err != nil {
			return fmt.Errorf("dpgomlx: %w", err)
		}
		o.red, o.bufs = red, bufs
	}
	if err := o.red.AllReduce(ctx); err != nil {
		return fmt.Errorf("dpgomlx: averaging the gradients: %w", err)
	}
	t1 := time.Now()
	if err := o.applyGradients(vctx); err != nil {
		return err
	}
	o.stats.AllReduce += t1.Sub(t0)
	o.stats.Update += time.Since(t1)
	o.stats.Steps++
	return nil
}

// applyGradients runs the update graph: the wrapped optimizer's update
// with the averaged gradients.
func (o *Optimizer) applyGradients(vctx *gctx.Context) error {
	if o.update == nil {
		var err error
		o.update, err = gctx.NewExec(o.backend, vctx.Checked(false), func(ctx *gctx.Context, g *graph.Graph) {
			grads := make([]*graph.Node, len(o.grads))
			for i, v := range o.vars {
				v.ValueGraph(g) // in use by this graph: the optimizer updates the variables in use
				grads[i] = o.grads[i].ValueGraph(g)
			}
			o.opt.UpdateGraphWithGradients(ctx, grads, o.lossDType)
		})
		if err != nil {
			return fmt.Errorf("dpgomlx: the update graph: %w", err)
		}
	}
	if _, err := o.update.Exec(); err != nil {
		return fmt.Errorf("dpgomlx: the update graph: %w", err)
	}
	return nil
}

// view is t's memory as a comm.Buffer, for reading and writing, counting
// the copies it costs (see the package doc).
func (o *Optimizer) view(t *tensors.Tensor) (comm.Buffer, error) {
	var b comm.Buffer
	var err error
	keep := func(flat any) { b, err = Buffer(flat) }
	if !t.IsShared() && t.IsOnAnyDevice() && !t.HasLocal() {
		if be, e := t.Backend(); e == nil && be.HasSharedBuffers() {
			// The device buffer is host memory: ConstFlatData hands it
			// over as is (backends.Backend.BufferData), and with no local
			// copy there is nothing for a write to put out of step.
			if e := t.ConstFlatData(keep); e != nil {
				return b, e
			}
			return b, err
		}
	}
	if !t.IsShared() {
		// MutableFlatData copies the tensor to the host if it is not there,
		// and drops its device copy: the next graph copies it back.
		n := int64(1)
		if !t.HasLocal() {
			n++
		}
		o.stats.Copies += n
		o.stats.CopiedBytes += n * int64(t.Memory())
	}
	if e := t.MutableFlatData(keep); e != nil {
		return b, e
	}
	return b, err
}

// broadcastWeights gives every rank rank 0's trainable variables.
func (o *Optimizer) broadcastWeights(ctx context.Context) error {
	bufs, err := o.weights()
	if err != nil {
		return err
	}
	if err := dp.Broadcast(ctx, o.c, 0, bufs...); err != nil {
		return fmt.Errorf("dpgomlx: the initial weights: %w", err)
	}
	return nil
}

// weights are the trainable variables' memory.
func (o *Optimizer) weights() ([]comm.Buffer, error) {
	bufs := make([]comm.Buffer, len(o.vars))
	for i, v := range o.vars {
		t, err := v.Value()
		if err == nil {
			bufs[i], err = o.view(t)
		}
		if err != nil {
			return nil, fmt.Errorf("dpgomlx: variable %s: %w", v.ScopeAndName(), err)
		}
	}
	return bufs, nil
}

// Identical checks, with dp.Identical, that every rank holds the same
// trainable variables, bit for bit. Every rank calls it at the same point.
func (o *Optimizer) Identical(ctx context.Context) error {
	bufs, err := o.weights()
	if err != nil {
		return err
	}
	return dp.Identical(ctx, o.c, bufs...)
}

// Stats is what the hook did so far.
func (o *Optimizer) Stats() Stats { return o.stats }

// Buckets are the Reducer's buckets (nil before the first step).
func (o *Optimizer) Buckets() []dp.Bucket {
	if o.red == nil {
		return nil
	}
	return o.red.Buckets()
}

// Buffer is a GoMLX flat slice (the argument of a tensors.Tensor's
// ConstFlatData or MutableFlatData callback) as a comm.Buffer on the same
// memory, for the dtypes that both know.
func Buffer(flat any) (comm.Buffer, error) {
	switch s := flat.(type) {
	case []float32:
		return comm.Host(s), nil
	case []float64:
		return comm.Host(s), nil
	case []int8:
		return comm.Host(s), nil
	case []uint8:
		return comm.Host(s), nil
	case []int32:
		return comm.Host(s), nil
	case []uint32:
		return comm.Host(s), nil
	case []int64:
		return comm.Host(s), nil
	case []uint64:
		return comm.Host(s), nil
	}
	return comm.Buffer{}, fmt.Errorf("a flat %T, which dpgomlx does not carry (f32, f64 and the integers)", flat)
}

// sameMemory says whether a and b are the same buffers.
func sameMemory(a, b []comm.Buffer) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Len() != b[i].Len() || a[i].DType() != b[i].DType() ||
			(a[i].Len() > 0 && &a[i].Bytes()[0] != &b[i].Bytes()[0]) {
			return false
		}
	}
	return true
}

var _ optimizers.Interface = (*Optimizer)(nil)
