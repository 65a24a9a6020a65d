package dpgomlx_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	gctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/dp"
	dpgomlx "github.com/hiercomm/hiercomm/integrations/gomlx"
	"github.com/hiercomm/hiercomm/nexar"
)

// linear is a model of one variable w (shape [n]): prediction x·w, no bias.
func linear(ctx *gctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
	x := inputs[0]
	w := ctx.VariableWithShape("w", shapes.Make(x.DType(), x.Shape().Dim(1))).ValueGraph(x.Graph())
	return []*graph.Node{graph.ReduceSum(graph.Mul(x, graph.InsertAxes(w, 0)), 1)}
}

// oneBatch is a train.Dataset that yields the same batch every step.
type oneBatch struct{ x, y []float32 }

func (d oneBatch) Name() string { return "one batch" }
func (d oneBatch) Reset()       {}
func (d oneBatch) Yield() (any, []*tensors.Tensor, []*tensors.Tensor, error) {
	n := len(d.y)
	return nil, []*tensors.Tensor{tensors.FromFlatDataAndDimensions(append([]float32(nil), d.x...), n, len(d.x)/n)},
		[]*tensors.Tensor{tensors.FromFlatDataAndDimensions(append([]float32(nil), d.y...), n)}, nil
}

// replica is one rank's trainer.
type replica struct {
	ctx  *gctx.Context
	opt  *dpgomlx.Optimizer
	loop *train.Loop
}

func newReplica(t *testing.T, backend backends.Backend, c comm.Communicator, opt optimizers.Interface, seed int64) *replica {
	ctx := gctx.New()
	ctx.SetParam(gctx.ParamInitialSeed, seed)
	o := dpgomlx.Wrap(c, opt)
	loop := train.NewLoop(train.NewTrainer(backend, ctx, linear, losses.MeanSquaredError, o, nil, nil))
	o.Attach(loop)
	return &replica{ctx, o, loop}
}

func world(t *testing.T, n int) []comm.Communicator {
	ns, err := nexar.NewMemoryWorld(n, nexar.Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cs := make([]comm.Communicator, n)
	for r, c := range ns {
		cs[r] = c
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

func backend(t *testing.T) backends.Backend {
	b, err := simplego.New("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Finalize)
	return b
}

func each(n int, f func(r int) error) []error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range n {
		wg.Go(func() { errs[r] = f(r) })
	}
	wg.Wait()
	return errs
}

func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func weights(t *testing.T, r *replica) []float32 {
	v := r.ctx.GetVariableByScopeAndName("/", "w")
	if v == nil {
		t.Fatal("no variable /w")
	}
	return tensors.MustCopyFlatData[float32](v.MustValue())
}

// TestAveragesRankDistinctGradients: each of 2 ranks trains on its own
// batch with SGD (lr 1, both from the initial weights of one seed), so
// one step moves w by minus the mean of the two ranks' gradients, which
// the test computes by hand; the replicas are bitwise identical after it and after more
// steps, and the hook copied nothing (simplego shares its buffers).
func TestAveragesRankDistinctGradients(t *testing.T) {
	const n = 2
	be, cs := backend(t), world(t, n)
	data := []oneBatch{
		{x: []float32{1, 2, 0, 1, 1, 1}, y: []float32{1, 2}},
		{x: []float32{0, 1, 3, 2, 0, 1}, y: []float32{-1, 4}},
	}
	reps := make([]*replica, n)
	for r := range n {
		reps[r] = newReplica(t, be, cs[r], optimizers.StochasticGradientDescent().WithLearningRate(1).Done(), int64(100)) // one seed: the same initial weights
	}
	noErrors(t, each(n, func(r int) error { _, err := reps[r].loop.RunSteps(data[r], 1); return err }))

	w := weights(t, reps[0])
	if got := weights(t, reps[1]); fmt.Sprint(got) != fmt.Sprint(w) {
		t.Fatalf("after a step the replicas differ: %v and %v", w, got)
	}
	noErrors(t, each(n, func(r int) error { return reps[r].opt.Identical(context.Background()) }))

	// The expected step: w1 = w0 - mean_r(grad_r(w0)), with the MSE loss
	// mean_i (x_i·w - y_i)² of each rank's batch, whose gradient is
	// 2/len · Σ_i (x_i·w - y_i) x_i.
	init := gctx.New()
	init.SetParam(gctx.ParamInitialSeed, int64(100))
	w0 := initial(t, be, init)
	want := make([]float64, len(w0))
	for _, d := range data {
		m := len(d.y)
		k := len(d.x) / m
		for i := range m {
			pred := 0.0
			for j := range k {
				pred += float64(d.x[i*k+j]) * float64(w0[j])
			}
			for j := range k {
				want[j] += 2 / float64(m) * (pred - float64(d.y[i])) * float64(d.x[i*k+j]) / n
			}
		}
	}
	for j := range want {
		if exp := float64(w0[j]) - want[j]; math.Abs(float64(w[j])-exp) > 1e-5 {
			t.Errorf("w[%d] after a step: %v, want %v (w0 %v, mean gradient %v)", j, w[j], exp, w0, want)
		}
	}

	noErrors(t, each(n, func(r int) error { _, err := reps[r].loop.RunSteps(data[r], 5); return err }))
	noErrors(t, each(n, func(r int) error { return reps[r].opt.Identical(context.Background()) }))
	for r, rep := range reps {
		st := rep.opt.Stats()
		if st.Steps != 6 || st.Copies != 0 {
			t.Errorf("rank %d: %v, want 6 steps and no copies", r, st)
		}
	}
}

// initial is the initial w that a context with ctx's seed draws.
func initial(t *testing.T, be backends.Backend, ctx *gctx.Context) []float32 {
	exec, err := gctx.NewExec(be, ctx, func(ctx *gctx.Context, x *graph.Node) *graph.Node {
		return linear(ctx, nil, []*graph.Node{x})[0]
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.Exec(tensors.FromFlatDataAndDimensions([]float32{0, 0, 0}, 1, 3)); err != nil {
		t.Fatal(err)
	}
	return tensors.MustCopyFlatData[float32](ctx.GetVariableByScopeAndName("/", "w").MustValue())
}

// TestOneRankIsTheWrappedOptimizer: on one rank, Adam through the wrapper
// gives the same weights, bit for bit, as Adam alone.
func TestOneRankIsTheWrappedOptimizer(t *testing.T) {
	be, cs := backend(t), world(t, 1)
	d := oneBatch{x: []float32{1, 2, 0, 1, 1, 1, 0, 1, 3}, y: []float32{1, 2, -1}}
	rep := newReplica(t, be, cs[0], optimizers.Adam().LearningRate(0.1).Done(), 7)
	if _, err := rep.loop.RunSteps(d, 10); err != nil {
		t.Fatal(err)
	}
	plain := gctx.New()
	plain.SetParam(gctx.ParamInitialSeed, int64(7))
	loop := train.NewLoop(train.NewTrainer(be, plain, linear, losses.MeanSquaredError, optimizers.Adam().LearningRate(0.1).Done(), nil, nil))
	if _, err := loop.RunSteps(d, 10); err != nil {
		t.Fatal(err)
	}
	got, want := weights(t, rep), weights(t, &replica{ctx: plain})
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("10 Adam steps through dpgomlx on 1 rank: %v; Adam alone: %v", got, want)
	}
	if st := rep.opt.Stats(); st.Steps != 10 || st.Copies != 0 {
		t.Errorf("%v, want 10 steps and no copies", st)
	}
	if err := dp.Identical(context.Background(), cs[0]); err != nil {
		t.Error(err)
	}
}

// TestBufferSharesMemory: Buffer is a view, not a copy.
func TestBufferSharesMemory(t *testing.T) {
	s := []float32{1, 2, 3}
	b, err := dpgomlx.Buffer(s)
	if err != nil {
		t.Fatal(err)
	}
	b.Bytes()[0] = 0
	b.Bytes()[1] = 0
	b.Bytes()[2] = 0
	b.Bytes()[3] = 0
	if s[0] != 0 || b.Len() != 3 || b.DType() != comm.F32 {
		t.Errorf("Buffer(%v) = %v: not a view of the slice", s, b)
	}
	if _, err := dpgomlx.Buffer([]string{"x"}); err == nil {
		t.Error("Buffer([]string) did not fail")
	}
}

// TestDifferentSeedsEndIdentical: ranks whose Contexts draw different
// initial weights hold rank 0's after the first step's broadcast, and stay
// identical.
func TestDifferentSeedsEndIdentical(t *testing.T) {
	const n = 2
	be, cs := backend(t), world(t, n)
	d := oneBatch{x: []float32{1, 2, 0, 1, 1, 1}, y: []float32{1, 2}}
	reps := make([]*replica, n)
	for r := range n {
		reps[r] = newReplica(t, be, cs[r], optimizers.Adam().Done(), int64(1+r))
	}
	noErrors(t, each(n, func(r int) error { _, err := reps[r].loop.RunSteps(d, 3); return err }))
	noErrors(t, each(n, func(r int) error { return reps[r].opt.Identical(context.Background()) }))
}

// TestCopiesCountedWhereNotShared: when the gradients have a local copy
// (a hook before dpgomlx's read them to the host), the AllReduce goes
// through MutableFlatData, which drops the device copy: one copy each, to
// the device again, counted; the step is as right as without it (the
// replicas match one trained without the extra hook).
func TestCopiesCountedWhereNotShared(t *testing.T) {
	const n, steps = 2, 3
	be := backend(t)
	d := []oneBatch{
		{x: []float32{1, 2, 0, 1, 1, 1}, y: []float32{1, 2}},
		{x: []float32{0, 1, 3, 2, 0, 1}, y: []float32{-1, 4}},
	}
	train2 := func(materialize bool) ([]*replica, [][]float32) {
		cs := world(t, n)
		reps := make([]*replica, n)
		for r := range n {
			reps[r] = newReplica(t, be, cs[r], optimizers.Adam().Done(), 5)
			if materialize {
				ctx := reps[r].ctx
				reps[r].loop.OnStep("to the host", dpgomlx.HookPriority-1, func(*train.Loop, []*tensors.Tensor) error {
					for v := range ctx.IterVariables() {
						if strings.HasPrefix(v.Scope(), dpgomlx.GradScope) {
							v.MustValue().MaterializeLocal()
						}
					}
					return nil
				})
			}
		}
		noErrors(t, each(n, func(r int) error { _, err := reps[r].loop.RunSteps(d[r], steps); return err }))
		noErrors(t, each(n, func(r int) error { return reps[r].opt.Identical(context.Background()) }))
		return reps, [][]float32{weights(t, reps[0]), weights(t, reps[1])}
	}
	_, want := train2(false)
	reps, got := train2(true)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("with the gradients on the host: %v; without: %v", got, want)
	}
	// 1 gradient (w), 1 copy a step; the weights, read at the first step's
	// broadcast and by Identical, are device tensors on a shared-buffer
	// backend: not copied.
	for r, rep := range reps {
		if st := rep.opt.Stats(); st.Copies != steps || st.CopiedBytes != steps*3*4 {
			t.Errorf("rank %d: %v, want %d copies of 12 bytes", r, st, steps)
		}
	}
}
