package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/dp"
	"github.com/hiercomm/hiercomm/examples/internal/mlp"
	"github.com/hiercomm/hiercomm/examples/internal/trainer"
)

// Elastic training: with -kill-rank R -kill-step S, rank R's process
// kills itself (SIGKILL) as step S (1, 2, …) begins, and the job goes on without
// it, as docs/errors.md ("Shrink and go on") tells a trainer to:
//
//  1. the survivors' step S fails with comm.ErrPeerFailed (naming R);
//  2. every survivor calls Shrink and gets the same communicator of the
//     survivors, renumbered in order (a hierarchy again if it spans
//     nodes);
//  3. the state is made one again from the new rank 0: the step to go on
//     from, the weights and the optimizer's state (a rank that died late
//     in a step may have let some survivors finish it and not others);
//  4. each survivor takes its share of every later global batch by its
//     new rank and the new size (dp.Shard: when the survivors do not divide
//     the batch, shares that differ by one sample), and redoes the step
//     that failed.
//
// The gradients are averaged with one blocking AllReduce per step (no
// buckets, no overlap: this mode shows recovery, not speed). Each rank
// multiplies its share's mean gradient and loss by its share's weight
// (n·size/B, 1 when the shares are equal) before the average, so the
// average is the mean over the whole global batch even when the shares
// differ. Every sample of every global batch is taken by exactly one
// rank, before the failure and after it, so each step sees the samples
// one process does, and -check-steps compares the run with one process
// across the failure whatever the number of survivors.
//
// With -grow-to N the job also grows back: after the Shrink, at the next
// step, the survivors call World.Grow until a replacement (a process
// started with HIERCOMM_JOIN=running and the same flags) is admitted and
// the job has N ranks again, or -grow-wait has passed (rank 0 decides,
// so that every rank stops calling Grow at once); the newcomer gets rank
// 0's step, weights and optimizer state as the survivors did after the
// Shrink, every rank takes its share by the grown World's rank and size,
// and training goes on (docs/errors.md, "Grow and go on").
type elastic struct {
	killRank, killStep int
	growTo             int
	growWait           time.Duration
}

func (e *elastic) flags(fs *flag.FlagSet) {
	fs.IntVar(&e.killRank, "kill-rank", -1, "with -kill-step: the rank whose process kills itself (SIGKILL) as that step begins; the others Shrink to the survivors and train on (docs/errors.md)")
	fs.IntVar(&e.killStep, "kill-step", -1, "the step (1, 2, …, as the progress lines count them) at whose start -kill-rank dies")
	fs.IntVar(&e.growTo, "grow-to", 0, "with -kill-rank: after the Shrink, Grow at the next step until the job has this many ranks again, admitting replacements started with HIERCOMM_JOIN=running and the same flags (0: do not grow)")
	fs.DurationVar(&e.growWait, "grow-wait", 2*time.Minute, "with -grow-to: how long the survivors wait for the replacements before they go on without them")
}

func (e elastic) check() error {
	if (e.killRank != -1 || e.killStep != -1) && (e.killRank < 0 || e.killStep < 1) {
		return fmt.Errorf("-kill-rank %d -kill-step %d: set both (a rank, and a step from 1), or neither", e.killRank, e.killStep)
	}
	if e.growTo < 0 || e.growTo > 0 && !e.on() {
		return fmt.Errorf("-grow-to %d: want a number of ranks to grow back to after -kill-rank's death (with -kill-rank and -kill-step)", e.growTo)
	}
	if e.growWait <= 0 {
		return fmt.Errorf("-grow-wait %v: want a positive duration", e.growWait)
	}
	return nil
}

func (e elastic) on() bool { return e.killStep > 0 }

// trainElastic trains as -kill-rank and -kill-step ask, on w and data.
func trainElastic(ctx context.Context, o options, w *hiercomm.World, data *trainer.Data) error {
	cfg, e := o.cfg, o.elastic
	if w.Size() < 2 || e.killRank >= w.Size() {
		return fmt.Errorf("-kill-rank %d: want a rank of the %d, and at least one other to go on", e.killRank, w.Size())
	}
	me := w.Rank() // the rank -kill-rank means
	newcomer := w.Generation() > 0
	var c comm.Communicator = w
	grower := w // the World that grows (a Shrink's or a Grow's result after one)
	growTo := e.growTo
	say := trainer.Printer(os.Stdout, c.Rank())
	net, err := mlp.New(cfg.Sizes(), cfg.Batch) // a share of the batch grows as ranks are lost
	if err != nil {
		return err
	}
	opt, err := mlp.NewOptimizer(cfg.Opt, cfg.LR)
	if err != nil {
		return err
	}
	p, g := make([]float32, net.NumParams()), make([]float32, net.NumParams())
	state := make([][]float32, opt.Slots())
	for i := range state {
		state[i] = make([]float32, len(p))
	}
	var next int // the step to run next
	if newcomer {
		// Admitted into the running job: the members hand over the
		// state as they do after a Grow.
		if err := resync(ctx, c, &next, p, state); err != nil {
			return fmt.Errorf("joining the running job: %w", err)
		}
	} else {
		if c.Rank() == 0 {
			net.Init(p, cfg.Seed)
		}
		if err := dp.Broadcast(ctx, c, 0, comm.Host(p)); err != nil {
			return fmt.Errorf("broadcasting the initial weights: %w", err)
		}
	}
	flat := mlp.Flat{Net: net, P: p, G: g}
	x, y := make([]float32, cfg.Batch*net.Inputs()), make([]uint8, cfg.Batch)
	total := data.TotalSteps()
	if newcomer {
		// Said by the newcomer itself (say speaks for rank 0 only).
		fmt.Printf("elastic: rank %d of %d on %d nodes, admitted into the running job: holding rank 0's weights and optimizer state after step %d, going on from step %d\n", c.Rank(), c.Size(), w.Topology().NumNodes(), next, next+1)
	} else {
		say("elastic: %d ranks on %d nodes; rank %d dies at step %d of %d and the others go on without it", c.Size(), w.Topology().NumNodes(), e.killRank, e.killStep, total)
	}
	gc := trainer.NewGradCheck(cfg, data, min(o.checkSteps, total))
	var (
		losses []float64 // the global loss of the first checkSteps steps
		checkP []float32 // the weights after them
	)
	for next < total {
		failed := func() error {
			for s := range data.Batches(0, 1) { // the whole global batches; dp.Shard cuts this rank's part
				if s.T < next {
					continue
				}
				if c.Size() < growTo {
					g, gaveUp, err := growBack(ctx, grower, growTo, e.growWait, say)
					if err != nil {
						return fmt.Errorf("growing before step %d: %w", s.T+1, err)
					}
					if gaveUp {
						growTo = 0
					}
					if g != grower {
						c.Close()
						c, grower, say = g, g, trainer.Printer(os.Stdout, g.Rank())
						return errGrown
					}
				}
				if s.T+1 == e.killStep && me == e.killRank && !newcomer {
					self, _ := os.FindProcess(os.Getpid())
					self.Kill()
					select {} // SIGKILL ends this
				}
				lo, hi := dp.Shard(len(s.Idx), c.Rank(), c.Size())
				loss, err := step(ctx, c, net, flat, data, s.Idx[lo:hi], weight(hi-lo, len(s.Idx), c.Size()), x, y)
				if err != nil {
					return fmt.Errorf("step %d: %w", s.T+1, err)
				}
				if s.T < gc.Steps() {
					// The averaged gradient against one process's at the
					// same weights (sound with any optimizer, across the
					// shrink: the check takes the communicator of the step).
					if err := gc.Check(ctx, c, s.T, p, g); err != nil {
						return err
					}
					if s.T == gc.Steps()-1 && c.Rank() == 0 {
						say("%s", gc.Summary(c.Size()))
					}
				}
				opt.Step(s.T+1, p, g, state)
				next = s.T + 1
				if s.T < o.checkSteps {
					losses = append(losses, loss)
					if s.T == o.checkSteps-1 || s.T == total-1 {
						checkP = slices.Clone(p)
					}
				}
				if next%cfg.Log == 0 || next == total {
					say("step %5d/%d  epoch %d  %d ranks  loss %.4f", next, total, s.Epoch+1, c.Size(), loss)
				}
			}
			return nil
		}()
		if failed == nil {
			break
		}
		if failed == errGrown {
			start := time.Now()
			if err := resync(ctx, c, &next, p, state); err != nil {
				return fmt.Errorf("after Grow: %w", err)
			}
			losses = losses[:min(len(losses), next)]
			say("grown to %d ranks (%T, generation %d) in %v; the newcomers hold rank 0's weights and optimizer state after step %d: going on from step %d with %s",
				c.Size(), grower.Communicator, grower.Generation(), time.Since(start).Round(time.Millisecond), next, next+1, shares(cfg.Batch, c.Size()))
			continue
		}
		if !errors.Is(failed, comm.ErrPeerFailed) {
			return failed
		}
		start := time.Now()
		s, err := c.Shrink(ctx)
		if err != nil {
			return fmt.Errorf("shrinking after %v: %w", failed, err)
		}
		c.Close()
		defer func() { c.Close() }() // the last of them: a Grow replaces it
		c, say = s, trainer.Printer(os.Stdout, s.Rank())
		grower = s.(*hiercomm.World)
		if err := resync(ctx, c, &next, p, state); err != nil {
			return fmt.Errorf("after Shrink: %w", err)
		}
		losses = losses[:min(len(losses), next)]
		say("%v\nshrunk to %d ranks (%T) in %v; every survivor holds rank 0's weights and optimizer state after step %d: going on from step %d with %s", failed, c.Size(), s, time.Since(start).Round(time.Millisecond), next, next+1, shares(cfg.Batch, c.Size()))
	}
	acc, err := trainer.Accuracy(ctx, c, net, flat, data)
	if err != nil {
		return err
	}
	say("test accuracy %.2f%% on %d images", 100*acc, data.Test.Len())
	if err := dp.Identical(ctx, c, comm.Host(p)); err != nil {
		return err
	}
	say("all %d replicas hold bitwise identical weights (hash %016x)", c.Size(), dp.Hash(comm.Host(p)))
	if o.checkSteps > 0 && cfg.Opt == "sgd" { // sound with SGD only: see lossTolerance
		return checkAgainstOne(ctx, c, cfg, data, losses, checkP)
	}
	return nil
}

// errGrown ends a pass over the batches when the World grew: the state is
// handed to the newcomers and the pass starts again from the same step.
var errGrown = errors.New("the world grew")

// growBack calls w.Grow until the World has size ranks or wait has
// passed (gaveUp), and returns the last World (w itself if nobody came).
// Rank 0 decides when to stop waiting and tells the others, so that every
// rank calls Grow equally often.
func growBack(ctx context.Context, w *hiercomm.World, size int, wait time.Duration, say func(string, ...any)) (g *hiercomm.World, gaveUp bool, err error) {
	start := time.Now()
	g = w
	for g.Size() < size {
		next, err := g.Grow(ctx, size-g.Size())
		if err != nil {
			return nil, false, err
		}
		if next != g {
			g = next
			continue
		}
		stop := []int64{0}
		if g.Rank() == 0 && time.Since(start) > wait {
			stop[0] = 1
		}
		if err := g.Broadcast(ctx, comm.Host(stop), 0); err != nil {
			return nil, false, err
		}
		if stop[0] == 1 {
			say("no replacement came within -grow-wait %v: going on with %d ranks", wait, g.Size())
			return g, true, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return g, false, nil
}

// step computes the gradient of this rank's samples idx (its share of the
// global batch), multiplies it by the share's weight w (see weight),
// averages it over the ranks of c in place, and returns the global loss,
// averaged the same way.
func step(ctx context.Context, c comm.Communicator, net *mlp.Net, flat mlp.Flat, data *trainer.Data, idx []int, w float64, x []float32, y []uint8) (float64, error) {
	n := len(idx)
	data.Train.Batch(idx, x[:n*net.Inputs()], y[:n])
	if _, err := net.Forward(flat, x[:n*net.Inputs()], n); err != nil {
		return 0, err
	}
	loss, err := net.Backward(flat, y[:n])
	if err != nil {
		return 0, err
	}
	if w != 1 {
		w32 := float32(w)
		for i := range flat.G {
			flat.G[i] *= w32
		}
	}
	if err := c.AllReduce(ctx, comm.Host(flat.G), comm.Host(flat.G), comm.Avg); err != nil {
		return 0, fmt.Errorf("averaging the gradients: %w", err)
	}
	l := []float64{loss * w}
	if err := c.AllReduce(ctx, comm.Host(l), comm.Host(l), comm.Avg); err != nil {
		return 0, fmt.Errorf("averaging the loss: %w", err)
	}
	return l[0], nil
}

// resync makes every rank of c hold rank 0's step, weights and optimizer
// state.
func resync(ctx context.Context, c comm.Communicator, next *int, p []float32, state [][]float32) error {
	t := []int64{int64(*next)}
	bufs := []comm.Buffer{comm.Host(t), comm.Host(p)}
	for _, s := range state {
		bufs = append(bufs, comm.Host(s))
	}
	if err := dp.Broadcast(ctx, c, 0, bufs...); err != nil {
		return err
	}
	*next = int(t[0])
	return nil
}
