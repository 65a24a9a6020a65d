// Command dataparallel trains a multi-layer perceptron on MNIST
// data-parallel, the way torch's DistributedDataParallel does: every rank
// holds the whole model, takes an equal share of each global batch, and
// the gradients are averaged across ranks in buckets (dp.Reducer) whose
// AllReduces start as soon as backward has produced them, so they run
// while backward computes the layers below; the step waits for them just
// before the optimizer. Every rank then applies the same
// update, so the replicas stay bitwise identical.
//
//	go run ./cmd/hiercomm run --nodes 2 --ranks-per-node 2 -- ./examples/dataparallel
//	go run ./examples/dataparallel            # one process
//
// It joins its job with hiercomm.Init, so it runs under `hiercomm run`,
// torchrun, srun or a Kubernetes Job (docs/deployment.md) and is
// hierarchical on several nodes. Rank 0 prints the loss, samples/s and the
// fraction of the gradients' communication hidden behind backward every
// -log steps, and the test accuracy after every epoch. In each of the
// first -check-steps steps it checks that every replica holds the same
// bits (dp.Identical) and that the averaged gradient is the one one
// process computes of the whole global batch at those weights, to within
// float32 rounding (trainer.GradCheck); at the end, that the replicas hold
// the same bits,
// and with SGD that the first steps' losses and weights are one
// process's (docs/training.md).
//
// With -device (the GPU tier; -fake-gpu for nccl's in-process fake) the
// parameters and the gradient buckets live in GPU memory and the
// AllReduces run on device buffers; the arithmetic stays on the host, so
// each layer's gradient is copied to the device as backward writes it and
// back after its bucket's AllReduce, and the updated parameters to the
// device after each step, and the copies are timed apart from the
// communication (trainer.Device).
//
//	go run ./cmd/hiercomm run --nodes 2 --ranks-per-node 1 -- ./examples/dataparallel -device -fake-gpu
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/dp"
	"github.com/hiercomm/hiercomm/examples/internal/mlp"
	"github.com/hiercomm/hiercomm/examples/internal/trainer"
)

// options are the flags.
type options struct {
	cfg         trainer.Config
	bucketBytes int
	checkSteps  int
	commProcs   int
	elastic     elastic // elastic.go
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fail(err)
		}
	}
}

// parse reads the flags.
func parse(args []string) (options, error) {
	o := options{cfg: trainer.Defaults()}
	fs := flag.NewFlagSet("dataparallel", flag.ContinueOnError)
	o.cfg.Flags(fs)
	bucketMiB := fs.Float64("bucket-mib", 1, "gradient bucket cap in MiB (torch DDP's bucket_cap_mb, 25 there: sized for models of hundreds of MB; this one has 4.2 MiB)")
	fs.IntVar(&o.checkSteps, "check-steps", 10, "check the first N steps' averaged gradients against one process's of the same global batches at the same weights (0: no check)")
	o.elastic.flags(fs)
	fs.IntVar(&o.commProcs, "comm-procs", 1, "GOMAXPROCS beyond the compute's, for the collectives' goroutines to progress during backward (a communication thread; 0: none)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q: every setting is a flag (-h lists them)", fs.Args())
	}
	if !(*bucketMiB > 0) {
		return o, fmt.Errorf("-bucket-mib %v: want a positive size", *bucketMiB)
	}
	if o.commProcs < 0 {
		return o, fmt.Errorf("-comm-procs %d: want 0 or more", o.commProcs)
	}
	if o.checkSteps < 0 {
		return o, fmt.Errorf("-check-steps %d: want 0 (no check) or more", o.checkSteps)
	}
	if err := o.elastic.check(); err != nil {
		return o, err
	}
	o.bucketBytes = int(*bucketMiB * (1 << 20))
	return o, nil
}

func fail(err error) {
	slog.Error("dataparallel failed", "err", err)
	os.Exit(1)
}

// run parses args, joins the job and trains.
func run(ctx context.Context, args []string) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	cfg := o.cfg
	w, data, err := trainer.Join(ctx, cfg)
	if err != nil {
		return err
	}
	defer w.Close()
	if o.elastic.on() {
		return trainElastic(ctx, o, w, data)
	}
	rank, size := w.Rank(), w.Size()
	say := trainer.Printer(os.Stdout, rank)
	dev := trainer.NewDevice(w.Device()) // nil: host memory
	hc := trainer.Host(w, dev)           // for the host values: losses, counts, hashes
	per := cfg.Batch / size
	net, err := mlp.New(cfg.Sizes(), per)
	if err != nil {
		return err
	}
	// The backward pass computes on this rank's share of the CPUs; the
	// collectives it starts run on the communicator's goroutines, which
	// with no P to spare would progress only when the scheduler preempts
	// the compute (every 10 ms): give them one, as a trainer in C++ gives
	// its communication a thread.
	net.Workers = runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(net.Workers + o.commProcs)
	opt, err := mlp.NewOptimizer(cfg.Opt, cfg.LR)
	if err != nil {
		return err
	}
	// The parameters and the gradient, with their device copies under
	// -device: the parameters' is the authoritative one (the initial
	// Broadcast runs on it, each step's update is written to it, the
	// checks at the end read it); the gradient's is where the buckets'
	// AllReduces run.
	pv, err := dev.Vector(net.NumParams())
	if err != nil {
		return err
	}
	defer pv.Free()
	gv, err := dev.Vector(net.NumParams())
	if err != nil {
		return err
	}
	defer gv.Free()
	p, g := pv.Host, gv.Host
	state := make([][]float32, opt.Slots())
	for i := range state {
		state[i] = make([]float32, len(p))
	}
	// Like DDP, rank 0's initial weights are every rank's.
	if rank == 0 {
		net.Init(p, cfg.Seed)
		if err := pv.Put(0, len(p)); err != nil {
			return err
		}
	}
	if err := dp.Broadcast(ctx, w, 0, pv.Buf(0, len(p))); err != nil {
		return fmt.Errorf("broadcasting the initial weights: %w", err)
	}
	if err := pv.Get(0, len(p)); err != nil {
		return err
	}
	red, err := newReducer(ctx, w, net, gv, o.bucketBytes)
	if err != nil {
		return err
	}
	say("%d ranks on %d nodes; MLP %v, %d parameters (%s); global batch %d (%d per rank), %d steps of %d images; %s lr %g",
		size, w.Topology().NumNodes(), cfg.Sizes(), net.NumParams(), mib(4*net.NumParams()), cfg.Batch, per, data.TotalSteps(), data.Train.Len(), cfg.Opt, cfg.LR)
	if dev != nil {
		say("on %v: parameters and gradient in device memory (%s per rank), the AllReduces on device buffers; forward, backward and the optimizer on the host (no GPU kernels), with copies: each bucket host→device before its AllReduce and device→host after it, the parameters host→device after each update",
			dev, mib(dev.Allocated()))
	}
	say("gradient buckets in backward order (cap %s): %v", mib(o.bucketBytes), red.buckets())
	alone, err := red.commAlone(5)
	if err != nil {
		return fmt.Errorf("timing the gradients' AllReduces: %w", err)
	}
	say("the buckets' AllReduces take %v per step alone (median of 5)", alone.Round(10*time.Microsecond))

	flat := mlp.Flat{Net: net, P: p, G: g, OnGrad: red.ready}
	copies := dev.Copies() // at the start of training
	x, y := make([]float32, per*net.Inputs()), make([]uint8, per)
	mine, all := make([]float64, 2), make([]float64, 2*size) // [loss, compute seconds] of each rank
	var (
		losses  []float64 // the global loss of the first checkSteps steps
		checkP  []float32 // the weights after them
		iv      interval  // since the last progress line
		started = time.Now()
		total   = data.TotalSteps()
	)
	iv.reset(dev)
	gc := trainer.NewGradCheck(cfg, data, min(o.checkSteps, total))
	for s := range data.Batches(shareOf(rank), size) {
		data.Train.Batch(s.Idx, x, y)
		begin := time.Now()
		if _, err := net.Forward(flat, x, per); err != nil {
			return err
		}
		loss, err := net.Backward(flat, y) // starts each bucket's AllReduce
		if err != nil {
			return err
		}
		end := time.Now()
		if err := red.wait(); err != nil {
			return fmt.Errorf("step %d: %w", s.T, err)
		}
		wait := time.Since(end)
		if err := red.fetch(); err != nil {
			return fmt.Errorf("step %d: %w", s.T, err)
		}
		if s.T < gc.Steps() {
			// The gradients were computed at these weights on every rank.
			if err := dp.Identical(ctx, hc, comm.Host(p)); err != nil {
				return fmt.Errorf("step %d: %w", s.T+1, err)
			}
			if err := gc.Check(ctx, hc, s.T, p, g); err != nil {
				return err
			}
			if s.T == gc.Steps()-1 && rank == 0 {
				say("%s", gc.Summary(size))
			}
		}
		opt.Step(s.T+1, p, g, state)
		if err := pv.Put(0, len(p)); err != nil {
			return fmt.Errorf("step %d: %w", s.T, err)
		}

		// Every rank's loss and compute time, to every rank: the mean
		// loss, and the slowest rank's backward (no rank's gradients are
		// complete before it ends, so waiting for it is not communication).
		mine[0], mine[1] = loss, end.Sub(begin).Seconds()
		if err := hc.AllGather(ctx, comm.Host(mine), comm.Host(all)); err != nil {
			return fmt.Errorf("step %d: gathering the losses: %w", s.T, err)
		}
		var gloss, slowest float64
		for r := range size {
			gloss += all[2*r] / float64(size)
			slowest = max(slowest, all[2*r+1])
		}
		iv.add(gloss, end.Sub(begin), wait, time.Duration(slowest*float64(time.Second)))
		if s.T < o.checkSteps {
			losses = append(losses, gloss)
			if s.T == o.checkSteps-1 || s.T == total-1 {
				if err := pv.Get(0, len(p)); err != nil { // the device's, on a device
					return err
				}
				checkP = append([]float32(nil), p...)
			}
		}
		if (s.T+1)%cfg.Log == 0 || s.T == total-1 {
			say("step %5d/%d  epoch %d  %s", s.T+1, total, s.Epoch+1, iv.line(cfg.Batch, alone, size))
			iv.reset(dev)
		}
		if (s.T+1)%data.StepsPerEpoch() == 0 || s.T == total-1 {
			acc, err := trainer.Accuracy(ctx, hc, net, flat, data)
			if err != nil {
				return err
			}
			say("epoch %d: test accuracy %.2f%% on %d images (%v since the start)", s.Epoch+1, 100*acc, data.Test.Len(), time.Since(started).Round(100*time.Millisecond))
			iv.reset(dev) // the evaluation is not training time
		}
	}
	if dev != nil {
		c := dev.Copies().Sub(copies)
		say("host↔device copies of the model in %d steps (rank 0): %v; per step %v", total, c, c.Per(total))
	}
	if err := pv.Get(0, len(p)); err != nil { // the device's, on a device
		return err
	}
	if err := dp.Identical(ctx, hc, comm.Host(p)); err != nil {
		return err
	}
	say("all %d replicas hold bitwise identical weights (hash %016x)", size, dp.Hash(comm.Host(p)))
	if o.checkSteps > 0 && cfg.Opt == "sgd" { // sound with SGD only: see lossTolerance
		if err := checkAgainstOne(ctx, hc, cfg, data, losses, checkP); err != nil {
			return err
		}
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// interval sums the steps between two progress lines.
type interval struct {
	start   time.Time
	steps   int
	loss    float64
	exposed time.Duration // communication that backward did not hide
	waited  time.Duration
	dev     *trainer.Device // nil: host memory
	copies  trainer.Copies  // dev's at the start
}

func (iv *interval) reset(dev *trainer.Device) {
	*iv = interval{start: time.Now(), dev: dev, copies: dev.Copies()}
}

// add counts one step: its mean loss; this rank's forward and backward
// (compute) and its wait for the gradients; the slowest rank's compute.
// This rank's wait is exposed communication only from the moment the
// slowest rank's backward ended (the steps start together: each ends with
// a collective), so exposed = compute + wait − slowest.
func (iv *interval) add(loss float64, compute, wait, slowest time.Duration) {
	iv.steps++
	iv.loss += loss
	iv.waited += wait
	iv.exposed += max(0, compute+wait-slowest)
}

// line is the progress line: loss, global samples/s, time per step, the
// wait, and the fraction of the communication hidden behind backward: one
// minus the exposed communication over what the AllReduces take alone.
func (iv *interval) line(batch int, alone time.Duration, size int) string {
	el := time.Since(iv.start)
	n := float64(iv.steps)
	s := fmt.Sprintf("loss %.4f  %5.0f samples/s  %6.1f ms/step", iv.loss/n, n*float64(batch)/el.Seconds(), ms(el)/n)
	if iv.dev != nil {
		c := iv.dev.Copies().Sub(iv.copies)
		s += fmt.Sprintf("  host↔device copies %.2f ms/step", ms(c.H2D+c.D2H)/n)
	}
	if size == 1 {
		return s
	}
	hidden := min(1, max(0, 1-float64(iv.exposed)/(n*float64(alone))))
	return s + fmt.Sprintf("  waited %5.1f ms/step, %5.1f of it after the slowest rank's backward; communication hidden %3.0f%%",
		ms(iv.waited)/n, ms(iv.exposed)/n, 100*hidden)
}

// Tolerances of the comparison of trajectories with one process: the
// losses of the first steps and the weights after them. The two runs
// start from the same weights and see the same samples; each step's
// gradients differ only by the grouping of float32 sums (a few units in
// their last place, trainer.GradCheck), and with SGD the weights then
// differ by lr times that, which training amplifies slowly: with
// -opt sgd -lr 0.05 on 4 single-rank nodes the run stayed within 6e-7 of
// one process in the loss and 9e-8 in a weight over 20 steps. With Adam
// the comparison is not sound: a gradient element that nearly cancels can
// change sign when its sum is regrouped, Adam's normalised update turns
// that into a step of about lr, and correct runs part from one process
// as far as faulty ones do (docs/training.md). So the trainer compares
// trajectories with SGD only; the gradient check, at the run's own
// weights, is the one that holds for every optimizer.
const (
	lossTolerance   = 1e-5
	weightTolerance = 1e-4
)

// checkAgainstOne has rank 0 train one process on the same global batches
// for as many steps as losses holds and compare; every rank returns its
// verdict. It is sound with SGD only (see lossTolerance).
func checkAgainstOne(ctx context.Context, w comm.Communicator, cfg trainer.Config, data *trainer.Data, losses []float64, p []float32) error {
	var err error
	if w.Rank() == 0 {
		start := time.Now()
		var refLosses []float64
		var refP []float32
		refLosses, refP, err = trainer.Reference(cfg, data, len(losses))
		if err == nil {
			dl, dp := trainer.Compare(losses, refLosses, p, refP)
			fmt.Printf("one process on the same %d global batches (%v): loss %.6f vs %.6f; max |Δloss| %.2e (tolerance %.0e), max |Δweight| %.2e (tolerance %.0e)\n",
				len(losses), time.Since(start).Round(time.Millisecond), refLosses[len(refLosses)-1], losses[len(losses)-1], dl, lossTolerance, dp, weightTolerance)
			if dl > lossTolerance || dp > weightTolerance {
				err = fmt.Errorf("%d ranks did not train as one process does: max |Δloss| %.2e, max |Δweight| %.2e over %d steps", w.Size(), dl, dp, len(losses))
			} else {
				fmt.Printf("same loss as one process: yes\n")
			}
		}
	}
	return trainer.Verdict(ctx, w, err)
}
