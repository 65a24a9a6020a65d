// Command mnist trains a multi-layer perceptron on MNIST with GoMLX (the
// pure-Go simplego backend), data-parallel over hiercomm with dpgomlx:
// every rank takes its share (dp.Shard) of each global batch, the
// gradients are averaged before the same Adam update, and at the end
// every rank checks that the replicas are bitwise identical and rank 0
// prints the test accuracy and the step breakdown (forward+backward graph,
// AllReduce, update graph).
//
//	go run .                                # 1 process
//	go build -o /tmp/gomlx-mnist .          # then, at the repository's root:
//	go run ./cmd/hiercomm run --nodes 2 --ranks-per-node 2 -- /tmp/gomlx-mnist
//
// It joins its job with hiercomm.Init, so it runs under `hiercomm run`,
// torchrun, Slurm or Kubernetes as the project's other examples do.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	gctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/layers/activations"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/dp"
	"github.com/hiercomm/hiercomm/dp/mnist"
	dpgomlx "github.com/hiercomm/hiercomm/integrations/gomlx"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "mnist:", err)
		}
		os.Exit(1)
	}
}

type config struct {
	epochs, batch, nTrain, nTest, log int
	hidden                            []int
	lr                                float64
	stock                             bool
	seed                              uint64
}

func parse(args []string) (config, error) {
	fs := flag.NewFlagSet("mnist", flag.ContinueOnError)
	var c config
	fs.IntVar(&c.epochs, "epochs", 2, "passes over the training set")
	fs.IntVar(&c.batch, "batch", 256, "global batch: every step, the ranks take their shares (dp.Shard) of this many images")
	fs.IntVar(&c.nTrain, "train", 0, "training images to keep (0: all 60,000)")
	fs.IntVar(&c.nTest, "test", 0, "test images to keep (0: all 10,000)")
	fs.IntVar(&c.log, "log", 50, "print rank 0's loss every this many steps (0: never)")
	hidden := fs.String("hidden", "512,256", "hidden layer widths")
	fs.Float64Var(&c.lr, "lr", 1e-3, "Adam's learning rate")
	fs.BoolVar(&c.stock, "stock-dense", false, "GoMLX's layers.DenseWithBias instead of dense.go's layer (the same model; a slower gradient)")
	fs.Uint64Var(&c.seed, "seed", 1, "the order of the samples (the same on every rank)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for _, f := range strings.Split(*hidden, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return c, fmt.Errorf("-hidden %q: want widths like 512,256", *hidden)
		}
		c.hidden = append(c.hidden, n)
	}
	return c, nil
}

func run(ctx context.Context, args []string, out io.Writer) error {
	cfg, err := parse(args)
	if err != nil {
		return err
	}
	w, err := hiercomm.Init(ctx, hiercomm.Options{})
	if err != nil {
		return err
	}
	defer w.Close()
	rank, size := w.Rank(), w.Size()
	say := func(format string, a ...any) {
		if rank == 0 {
			fmt.Fprintf(out, format+"\n", a...)
		}
	}
	trainSet, testSet, err := mnist.Load("", cfg.nTrain, cfg.nTest)
	if err != nil {
		return err
	}
	if lo, hi := dp.Shard(cfg.batch, size-1, size); hi-lo == 0 {
		return fmt.Errorf("-batch %d leaves rank %d of %d no image", cfg.batch, size-1, size)
	}
	backend, err := simplego.New("")
	if err != nil {
		return err
	}
	defer backend.Finalize()

	model := func(ctx *gctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
		return []*graph.Node{logits(ctx, inputs[0], cfg)}
	}
	vctx := gctx.New()
	opt := dpgomlx.Wrap(w, optimizers.Adam().LearningRate(cfg.lr).Done()) // line 1 of 2
	trainer := train.NewTrainer(backend, vctx, model, losses.SparseCategoricalCrossEntropyLogits, opt, nil, nil)
	loop := train.NewLoop(trainer)
	opt.Attach(loop) // line 2 of 2

	ds := &shards{set: trainSet, batch: cfg.batch, rank: rank, size: size, seed: cfg.seed}
	steps := ds.stepsPerEpoch()
	layer := "dense.go's dense layers"
	if cfg.stock {
		layer = "layers.DenseWithBias"
	}
	say("%d ranks on %d nodes; GoMLX %s backend; MLP 784-%s-10 (%s), Adam lr %g; global batch %d (%d per rank), %d steps per epoch, %d epochs",
		size, w.Topology().NumNodes(), backend.Name(), join(cfg.hidden), layer, cfg.lr, cfg.batch, cfg.batch/size, steps, cfg.epochs)

	var first dpgomlx.Stats // after step 1, whose times include compiling the graphs
	loop.OnStep("log", 0, func(loop *train.Loop, metrics []*tensors.Tensor) error {
		step := loop.LoopStep + 1
		if step == 1 {
			first = opt.Stats()
		}
		if cfg.log > 0 && (step%cfg.log == 0 || step == cfg.epochs*steps) {
			say("step %4d/%d  loss %.4f (rank 0's shard)", step, cfg.epochs*steps, tensors.ToScalar[float32](metrics[0]))
		}
		return nil
	})
	start := time.Now()
	if _, err := loop.RunEpochs(ds, cfg.epochs); err != nil {
		return fmt.Errorf("rank %d: training: %w", rank, err)
	}
	durations := loop.TrainStepDurations // each: the train graph and the OnStep hooks
	elapsed := time.Since(start)
	if err := opt.Identical(ctx); err != nil {
		return err
	}
	say("all %d replicas hold bitwise identical weights (dp.Identical)", size)

	st := opt.Stats()
	if n := len(durations) - 1; n > 0 {
		var total time.Duration
		for _, d := range durations[1:] {
			total += d
		}
		ar, up := st.AllReduce-first.AllReduce, st.Update-first.Update
		per := func(d time.Duration) string { return (d / time.Duration(n)).Round(100 * time.Microsecond).String() }
		say("step breakdown, mean of steps 2-%d: forward+backward graph %s, AllReduce %s, update graph %s; step %s",
			n+1, per(total-ar-up), per(ar), per(up), per(total))
	}
	say("gradients: %d buckets %v; %d tensor copies (%d bytes) between host and device; the Reducer was remade %d times",
		len(opt.Buckets()), opt.Buckets(), st.Copies, st.CopiedBytes, st.Rebinds)
	acc, err := accuracy(backend, vctx, cfg, testSet)
	if err != nil {
		return err
	}
	say("trained in %v; test accuracy %.2f%% (%d images)", elapsed.Round(100*time.Millisecond), 100*acc, testSet.Len())
	return nil
}

// logits is the MLP: dense layers with ReLU between them.
func logits(ctx *gctx.Context, x *graph.Node, cfg config) *graph.Node {
	layer := func(i int, x *graph.Node, n int) *graph.Node {
		ctx := ctx.In(fmt.Sprintf("dense%d", i))
		if cfg.stock {
			return layers.DenseWithBias(ctx, x, n)
		}
		return dense(ctx, x, n, i > 0)
	}
	for i, n := range cfg.hidden {
		x = activations.Relu(layer(i, x, n))
	}
	return layer(len(cfg.hidden), x, mnist.Classes)
}

// accuracy is the share of set that the model in vctx classifies right.
func accuracy(backend backends.Backend, vctx *gctx.Context, cfg config, set *mnist.Set) (float64, error) {
	predict, err := gctx.NewExec(backend, vctx.Reuse(), func(ctx *gctx.Context, x *graph.Node) *graph.Node {
		return graph.ArgMax(logits(ctx, x, cfg), -1)
	})
	if err != nil {
		return 0, err
	}
	const chunk = 1000
	right := 0
	for lo := 0; lo < set.Len(); lo += chunk {
		hi := min(lo+chunk, set.Len())
		x := tensors.FromFlatDataAndDimensions(slices.Clone(set.Images[lo*mnist.Pixels:hi*mnist.Pixels]), hi-lo, mnist.Pixels)
		res, err := predict.Exec(x)
		if err != nil {
			return 0, err
		}
		for k, p := range tensors.MustCopyFlatData[int32](res[0]) {
			if int(p) == int(set.Labels[lo+k]) {
				right++
			}
		}
	}
	return float64(right) / float64(set.Len()), nil
}

// shards is a train.Dataset that yields, each step, this rank's share of
// the next global batch of an epoch's order (mnist.Order: the same on
// every rank), dropping the last incomplete batch.
type shards struct {
	set               *mnist.Set
	batch, rank, size int
	seed              uint64
	epoch, step       int
	order             []int
}

func (d *shards) Name() string       { return "mnist shard" }
func (d *shards) stepsPerEpoch() int { return d.set.Len() / d.batch }
func (d *shards) Reset()             { d.epoch, d.step, d.order = d.epoch+1, 0, nil }

func (d *shards) Yield() (spec any, inputs, labels []*tensors.Tensor, err error) {
	if d.step >= d.stepsPerEpoch() {
		return nil, nil, nil, io.EOF
	}
	if d.order == nil {
		d.order = mnist.Order(d.set.Len(), d.seed, d.epoch)
	}
	lo, hi := dp.Shard(d.batch, d.rank, d.size)
	idx := d.order[d.step*d.batch+lo : d.step*d.batch+hi]
	d.step++
	x := make([]float32, len(idx)*mnist.Pixels)
	y8 := make([]uint8, len(idx))
	d.set.Batch(idx, x, y8)
	y := make([]int32, len(idx))
	for i, l := range y8 {
		y[i] = int32(l)
	}
	return nil, []*tensors.Tensor{tensors.FromFlatDataAndDimensions(x, len(idx), mnist.Pixels)},
		[]*tensors.Tensor{tensors.FromFlatDataAndDimensions(y, len(idx), 1)}, nil
}

func join(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, "-")
}
