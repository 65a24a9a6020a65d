// Package trainer is what the example trainers (dataparallel, zero) share
// around the model: their common flags, the MNIST data (dp/mnist) cut into
// global batches and each rank's part of them, test accuracy computed by
// every rank on its share of the test set, the single-process reference
// run they compare themselves with, and for -device the vectors kept in
// GPU memory (Device, Vector) and the staging of host values on a GPU
// world (Host); the replica check and the gradient buckets are dp's. It
// imports hiercomm (Init), comm (the collectives it calls), mlp, dp (each
// rank's share: dp.Shard) and dp/mnist, and for -device nccl (a rank's GPU, the fake) and
// cluster/launchenv (the name of HIERCOMM_INTRA); never a transport.
package trainer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/dp"
	"github.com/hiercomm/hiercomm/dp/mnist"
	"github.com/hiercomm/hiercomm/examples/internal/mlp"
	"github.com/hiercomm/hiercomm/nccl/ncclfake"
)

// Config is what the trainers' common flags set.
type Config struct {
	Epochs int     // passes over the training set
	Steps  int     // if > 0, stop after this many steps in all
	Batch  int     // global batch: samples per step over all ranks
	Hidden []int   // hidden layer widths
	Opt    string  // "adam" or "sgd"
	LR     float64 // learning rate
	Seed   uint64  // initial weights and the data order
	Train  int     // if > 0, train on the first Train images only
	Test   int     // if > 0, test on the first Test images only
	Data   string  // directory of the IDX files; "" finds the GoMNIST module
	Log    int     // print a progress line every Log steps
	// Device keeps the vectors the collectives move in GPU memory and runs
	// the collectives there (the nccl tier; see Device); FakeGPU puts the
	// run on nccl's in-process fake instead of a GPU.
	Device, FakeGPU bool
}

// Defaults is the configuration the flags start from.
func Defaults() Config {
	return Config{Epochs: 2, Batch: 128, Hidden: []int{1024, 256, 128}, Opt: "adam", LR: 1e-3, Seed: 1, Log: 50}
}

// Flags registers the common flags on fs, with c's values as their
// defaults (start from Defaults).
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.IntVar(&c.Epochs, "epochs", c.Epochs, "passes over the training set")
	fs.IntVar(&c.Steps, "steps", c.Steps, "if > 0, stop after this many steps")
	fs.IntVar(&c.Batch, "batch", c.Batch, "global batch: samples per step over all ranks (a multiple of the number of ranks)")
	fs.Func("hidden", fmt.Sprintf("hidden layer widths, comma-separated (default %s)", strings.Trim(strings.Join(strings.Fields(fmt.Sprint(c.Hidden)), ","), "[]")), func(s string) error {
		h, err := parseWidths(s)
		c.Hidden = h
		return err
	})
	fs.StringVar(&c.Opt, "opt", c.Opt, "optimizer: adam or sgd (momentum 0.9)")
	fs.Float64Var(&c.LR, "lr", c.LR, "learning rate")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the initial weights and of the data order")
	fs.IntVar(&c.Train, "train", c.Train, "if > 0, train on the first N training images only")
	fs.IntVar(&c.Test, "test", c.Test, "if > 0, test on the first N test images only")
	fs.StringVar(&c.Data, "data", c.Data, "directory holding the MNIST IDX files (default: the GoMNIST module's data/)")
	fs.IntVar(&c.Log, "log", c.Log, "print a progress line every N steps")
	fs.BoolVar(&c.Device, "device", c.Device, "keep the gradients and parameters the collectives move in GPU memory and run the collectives on device buffers (the nccl tier: NCCL in a node, pinned host staging between nodes); "+
		"the arithmetic stays on the host (hiercomm has no GPU kernels), so each bucket or shard is copied host↔device around its collective, and the copies are timed apart from the communication")
	fs.BoolVar(&c.FakeGPU, "fake-gpu", c.FakeGPU, "with -device: run on nccl's in-process fake GPU (host memory standing in for device memory) where there is no GPU; the fake spans one process, so one rank per node")
}

func parseWidths(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: want positive integers separated by commas, like 1024,256,128", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// Check says what is wrong with c for a world of size ranks.
func (c Config) Check(size int) error {
	switch {
	case c.Epochs < 1:
		return fmt.Errorf("-epochs %d: want at least 1", c.Epochs)
	case c.Steps < 0:
		return fmt.Errorf("-steps %d: want 0 (whole epochs) or more", c.Steps)
	case c.Batch < 1 || c.Batch%size != 0:
		return fmt.Errorf("-batch %d: want a positive multiple of the %d ranks (each rank takes an equal share of every global batch)", c.Batch, size)
	case c.Train < 0 || c.Test < 0:
		return fmt.Errorf("-train %d -test %d: want 0 (all) or a positive number of images", c.Train, c.Test)
	case c.Log < 1:
		return fmt.Errorf("-log %d: want at least 1", c.Log)
	case c.FakeGPU && !c.Device:
		return errors.New("-fake-gpu without -device: the fake GPU is for a run on device buffers")
	}
	if _, err := mlp.NewOptimizer(c.Opt, c.LR); err != nil {
		return fmt.Errorf("-opt %s -lr %v: %w", c.Opt, c.LR, err)
	}
	return nil
}

// Sizes are the net's layer widths: the pixels, the hidden widths, the
// classes.
func (c Config) Sizes() []int {
	return append(append([]int{mnist.Pixels}, c.Hidden...), mnist.Classes)
}

// Data is the training and test sets as Config asks for them.
type Data struct {
	Train, Test *mnist.Set
	cfg         Config
}

// Load reads the data sets and checks that they make at least one step.
func Load(c Config) (*Data, error) {
	train, test, err := mnist.Load(c.Data, c.Train, c.Test)
	if err != nil {
		return nil, err
	}
	d := &Data{Train: train, Test: test, cfg: c}
	if d.Train.Len() < c.Batch {
		return nil, fmt.Errorf("-train %d: fewer training images than one batch of %d", d.Train.Len(), c.Batch)
	}
	return d, nil
}

// StepsPerEpoch is the number of whole global batches in the training
// set (a last partial batch is dropped, as torch's drop_last).
func (d *Data) StepsPerEpoch() int { return d.Train.Len() / d.cfg.Batch }

// TotalSteps is the number of steps the run makes.
func (d *Data) TotalSteps() int {
	n := d.cfg.Epochs * d.StepsPerEpoch()
	if d.cfg.Steps > 0 {
		n = min(n, d.cfg.Steps)
	}
	return n
}

// Step is one training step: its number T (0, 1, …), the epoch it is in,
// and the samples of global batch T that this rank takes.
type Step struct {
	T, Epoch int
	Idx      []int
}

// Batches yields every step of the run (TotalSteps of them) for rank of
// size ranks: global batch t is Batch consecutive samples of its epoch's
// order (the same on every rank), and rank r takes its dp.Shard of it (the
// r-th of size equal parts: Check holds Batch to a multiple of size).
func (d *Data) Batches(rank, size int) iter.Seq[Step] {
	return func(yield func(Step) bool) {
		lo, hi := dp.Shard(d.cfg.Batch, rank, size)
		var order []int
		for t := range d.TotalSteps() {
			e, s := t/d.StepsPerEpoch(), t%d.StepsPerEpoch()
			if s == 0 {
				order = mnist.Order(d.Train.Len(), d.cfg.Seed, e)
			}
			at := s * d.cfg.Batch
			if !yield(Step{T: t, Epoch: e, Idx: order[at+lo : at+hi]}) {
				return
			}
		}
	}
}

// Join joins this process to its job with hiercomm.Init (bounded by two
// minutes), checks c for the world it got and loads the data. The caller
// closes the World.
//
// With -device the GPU tier is required, as HIERCOMM_INTRA=nccl requires
// it: where it cannot be had (no driver, no NCCL, no GPU) Init fails with
// the reason, before joining; with -fake-gpu, nccl's in-process fake is
// the GPU. Without -device, a World on device memory (Init found a GPU)
// is an error that says what to do: the trainers' host buffers cannot
// travel on it.
func Join(ctx context.Context, c Config) (*hiercomm.World, *Data, error) {
	if c.FakeGPU && !c.Device {
		return nil, nil, c.Check(1)
	}
	opt, err := c.initOptions()
	if err != nil {
		return nil, nil, err
	}
	initCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	w, err := hiercomm.Init(initCtx, opt)
	if err != nil {
		if c.Device && !c.FakeGPU {
			return nil, nil, fmt.Errorf("-device needs the GPU tier (-fake-gpu runs on nccl's in-process fake): %w", err)
		}
		return nil, nil, err
	}
	if w.Device() != nil && !c.Device {
		w.Close()
		return nil, nil, fmt.Errorf("rank %d: Init found %v and returned a world on device memory, which the trainer's host buffers cannot use: run with -device, or set %s=shm to train on host memory", w.Rank(), w.Device(), launchenv.EnvIntra)
	}
	if err := c.Check(w.Size()); err != nil {
		w.Close()
		return nil, nil, err
	}
	d, err := Load(c)
	if err != nil {
		w.Close()
		return nil, nil, err
	}
	return w, d, nil
}

// initOptions are Init's options for c: with -device, the environment
// as it is but for HIERCOMM_INTRA, which reads nccl (the GPU tier or an
// error), and with -fake-gpu nccl's in-process fake as the GPU library.
// -device with HIERCOMM_INTRA set to a host tier is a contradiction.
func (c Config) initOptions() (hiercomm.Options, error) {
	var opt hiercomm.Options
	if !c.Device {
		return opt, nil
	}
	switch intra := os.Getenv(launchenv.EnvIntra); intra {
	case "", "auto", "nccl":
	default:
		return opt, fmt.Errorf("-device with %s=%s, which keeps the world on host memory: unset it or set it to nccl", launchenv.EnvIntra, intra)
	}
	opt.Getenv = func(k string) string {
		if k == launchenv.EnvIntra {
			return "nccl"
		}
		return os.Getenv(k)
	}
	if c.FakeGPU {
		opt.GPU = ncclfake.New(ncclfake.Options{Devices: 1})
	}
	return opt, nil
}

// Printer returns a Printf to out that prints on rank 0 only, a line per
// call.
func Printer(out io.Writer, rank int) func(format string, a ...any) {
	return func(format string, a ...any) {
		if rank == 0 {
			fmt.Fprintf(out, format+"\n", a...)
		}
	}
}
