package dp_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/dp"
	"github.com/hiercomm/hiercomm/nexar"
)

// mlpLens are the gradients of the example trainers' default net
// (784-1024-256-128-10), weights and biases apart: 4.2 MiB of f32.
var mlpLens = []int{784 * 1024, 1024, 1024 * 256, 256, 256 * 128, 128, 128 * 10, 10}

// noop is a Decorator whose calls do nothing and are done at once, without
// allocating: under it, every allocation of a step is the Reducer's.
type noop struct{}

func (noop) Start(context.Context, comm.Call, comm.Communicator) *comm.Work {
	return comm.Succeeded()
}
func (noop) Derive(comm.Communicator) comm.Decorator { return nil }

// TestReducerStepAllocatesNothing: in steady state a step — every gradient
// marked Ready in backward order, the packed buckets filled, their
// AllReduces started, Wait, the results unpacked — allocates nothing in
// the Reducer (on a communicator whose calls allocate nothing), packed
// buckets and in-place ones alike.
func TestReducerStepAllocatesNothing(t *testing.T) {
	cs := world(t, 1)
	c := comm.Wrap(cs[0], noop{})
	ctx := context.Background()
	grads := rankGrads(comm.F32, []int{3000, 30, 2000, 20, 10}, 0)
	for _, bucketBytes := range []int{1 << 20, 8000} { // one packed bucket; several, in place and packed
		red, err := dp.NewReducer(c, grads, dp.Options{BucketBytes: bucketBytes})
		if err != nil {
			t.Fatal(err)
		}
		step := func() {
			for i := len(grads) - 1; i >= 0; i-- {
				red.Ready(ctx, i)
			}
			if err := red.Wait(); err != nil {
				t.Fatal(err)
			}
		}
		step()
		if n := testing.AllocsPerRun(100, step); n != 0 {
			t.Errorf("buckets %v: %v allocations per step, want 0", red.Buckets(), n)
		}
	}
}

// stepper runs one step on every rank of an in-memory world from the
// caller's goroutine, through goroutines that live as long as it does, so
// that a step allocates only what the step itself allocates.
type stepper struct {
	go_, done []chan error
}

func newStepper(t testing.TB, n int, step func(r int) error) *stepper {
	s := &stepper{}
	for r := range n {
		g, d := make(chan error), make(chan error)
		s.go_, s.done = append(s.go_, g), append(s.done, d)
		go func() {
			for range g {
				d <- step(r)
			}
		}()
	}
	t.Cleanup(func() {
		for _, g := range s.go_ {
			close(g)
		}
	})
	return s
}

func (s *stepper) step() error {
	for _, g := range s.go_ {
		g <- nil
	}
	var first error
	for _, d := range s.done {
		if err := <-d; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// stepWays are three ways of averaging one step's gradients on an
// in-memory world of n ranks: the Reducer, the same buckets' AllReduces
// started on their packed buffers directly (what the communicator itself
// allocates), and comm.AllReduceFused of the same buckets.
func stepWays(t testing.TB, n int, lens []int, bucketBytes int) map[string]*stepper {
	ctx := context.Background()
	cs := world(t, n)
	grads := make([][]comm.Buffer, n)
	reds := make([]*dp.Reducer, n)
	for r, c := range cs {
		grads[r] = rankGrads(comm.F32, lens, r)
		var err error
		if reds[r], err = dp.NewReducer(c, grads[r], dp.Options{BucketBytes: bucketBytes}); err != nil {
			t.Fatal(err)
		}
	}
	buckets := reds[0].Buckets()
	packed := make([][]comm.Buffer, n) // per rank, a buffer per bucket
	for r := range n {
		for _, b := range buckets {
			packed[r] = append(packed[r], comm.Host(make([]float32, b.Len)))
		}
	}
	works := make([][]*comm.Work, n)
	return map[string]*stepper{
		"dp.Reducer": newStepper(t, n, func(r int) error {
			for i := len(grads[r]) - 1; i >= 0; i-- {
				reds[r].Ready(ctx, i)
			}
			return reds[r].Wait()
		}),
		"the collectives alone": newStepper(t, n, func(r int) error {
			works[r] = works[r][:0]
			for _, p := range packed[r] {
				works[r] = append(works[r], comm.StartAllReduce(ctx, cs[r], p, p, comm.Avg))
			}
			for _, w := range works[r] {
				if err := w.Wait(); err != nil {
					return err
				}
			}
			return nil
		}),
		"comm.AllReduceFused": newStepper(t, n, func(r int) error {
			works[r] = works[r][:0]
			for _, b := range buckets {
				works[r] = append(works[r], comm.StartAllReduceFused(ctx, cs[r], grads[r][b.First:b.Last+1], comm.Avg))
			}
			for _, w := range works[r] {
				if err := w.Wait(); err != nil {
					return err
				}
			}
			return nil
		}),
	}
}

// TestReducerAllocatesNoMoreThanItsCollectives: on an in-memory world of 2
// ranks, a Reducer's step allocates no more than its buckets' AllReduces
// started directly on buffers laid out beforehand: whatever a step
// allocates, the communicator does.
func TestReducerAllocatesNoMoreThanItsCollectives(t *testing.T) {
	if raceEnabled {
		// Under the race detector sync.Pool drops items at random, so the
		// in-memory world's allocations vary from step to step (CI saw 43
		// against 41). make test runs this test without it;
		// TestReducerStepAllocatesNothing, exact on a world that allocates
		// nothing, runs under it.
		t.Skip("allocation counts of the in-memory world vary under the race detector (sync.Pool drops items at random); make test runs this test without it")
	}
	ways := stepWays(t, 2, []int{3000, 30, 2000, 20, 10}, 8000)
	allocs := map[string]float64{}
	for name, s := range ways {
		if err := s.step(); err != nil {
			t.Fatal(err)
		}
		allocs[name] = testing.AllocsPerRun(50, func() {
			if err := s.step(); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Logf("allocations per step over 2 ranks: %v", allocs)
	if allocs["dp.Reducer"] > allocs["the collectives alone"] {
		t.Errorf("a Reducer's step: %v allocations, its collectives alone %v", allocs["dp.Reducer"], allocs["the collectives alone"])
	}
}

// BenchmarkStep measures one step's reduction of the example trainers'
// gradients (mlpLens, 4.2 MiB of f32) on an in-memory world of 2 ranks in
// 1 MiB buckets, three ways (see stepWays); B/op and allocs/op count both
// ranks.
func BenchmarkStep(b *testing.B) {
	ways := stepWays(b, 2, mlpLens, 1<<20)
	for _, name := range []string{"dp.Reducer", "the collectives alone", "comm.AllReduceFused"} {
		b.Run(name, func(b *testing.B) {
			s := ways[name]
			b.ReportAllocs()
			for b.Loop() {
				if err := s.step(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// ExampleReducer averages two ranks' gradients of a two-layer model (a
// weight and a bias per layer) in buckets of at most 12 bytes, each
// bucket's AllReduce starting as soon as backward has marked its gradients
// Ready, last layer first: layer 1's two gradients are packed into one
// bucket, and layer 0's bias and weight, which do not fit one, are each
// reduced in place.
func ExampleReducer() {
	world := exampleWorld(2)
	defer func() {
		for _, c := range world {
			c.Close()
		}
	}()
	done := make(chan string, 2)
	for _, c := range world {
		go func() {
			ctx := context.Background()
			r := float32(c.Rank())
			w0, b0 := []float32{1 + r, 2 + r, 3 + r}, []float32{r}
			w1, b1 := []float32{10 * r, 20 * r}, []float32{4}
			grads := []comm.Buffer{comm.Host(w0), comm.Host(b0), comm.Host(w1), comm.Host(b1)}
			red, err := dp.NewReducer(c, grads, dp.Options{BucketBytes: 12})
			if err != nil {
				panic(err)
			}
			for i := len(grads) - 1; i >= 0; i-- { // backward: the last layer first
				red.Ready(ctx, i)
			}
			if err := red.Wait(); err != nil {
				panic(err)
			}
			done <- fmt.Sprint(c.Rank(), red.Buckets(), w0, b0, w1, b1)
		}()
	}
	lines := []string{<-done, <-done}
	if lines[0][0] == '1' {
		lines[0], lines[1] = lines[1], lines[0]
	}
	fmt.Println(lines[0])
	fmt.Println(lines[1])
	// Output:
	// 0 [grads 2-3 (3×f32, packed) grad 1 (1×f32, in place) grad 0 (3×f32, in place)] [1.5 2.5 3.5] [0.5] [5 10] [4]
	// 1 [grads 2-3 (3×f32, packed) grad 1 (1×f32, in place) grad 0 (3×f32, in place)] [1.5 2.5 3.5] [0.5] [5 10] [4]
}

// exampleWorld is an in-memory world of n ranks (a real trainer's is
// hiercomm.Init's World).
func exampleWorld(n int) []comm.Communicator {
	ns, err := nexar.NewMemoryWorld(n, nexar.Options{})
	if err != nil {
		panic(err)
	}
	cs := make([]comm.Communicator, n)
	for r, c := range ns {
		cs[r] = c
	}
	return cs
}

// Shard cuts a global batch of 128 samples among 3 ranks (after a Shrink
// from 4, say): every sample once, shares that differ by one.
func ExampleShard() {
	for r := range 3 {
		lo, hi := dp.Shard(128, r, 3)
		fmt.Printf("rank %d: samples [%d, %d), %d of them\n", r, lo, hi, hi-lo)
	}
	// Output:
	// rank 0: samples [0, 43), 43 of them
	// rank 1: samples [43, 86), 43 of them
	// rank 2: samples [86, 128), 42 of them
}
