package dp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/dp"
	"github.com/hiercomm/hiercomm/nexar"
)

// world is an in-memory world of n ranks, closed when the test ends.
func world(t testing.TB, n int) []comm.Communicator {
	t.Helper()
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

// each runs f on every rank at once and returns each rank's error.
func each(cs []comm.Communicator, f func(r int, c comm.Communicator) error) []error {
	var wg sync.WaitGroup
	errs := make([]error, len(cs))
	for r, c := range cs {
		wg.Go(func() { errs[r] = f(r, c) })
	}
	wg.Wait()
	return errs
}

// noErrors fails t for every rank's error.
func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// ctxT bounds a test's collectives.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// values makes a host buffer of dt holding vals (small integers, exact in
// every dtype).
func values(dt comm.DType, vals []float64) comm.Buffer {
	switch dt {
	case comm.F32:
		return typed(vals, func(v float64) float32 { return float32(v) })
	case comm.F64:
		return typed(vals, func(v float64) float64 { return v })
	case comm.F16:
		return typed(vals, comm.Float16FromFloat64)
	case comm.BF16:
		return typed(vals, comm.BFloat16FromFloat64)
	case comm.I32:
		return typed(vals, func(v float64) int32 { return int32(v) })
	}
	panic(fmt.Sprintf("values: dtype %v", dt))
}

// typed is a host buffer of vals converted by conv.
func typed[T comm.Element](vals []float64, conv func(float64) T) comm.Buffer {
	s := make([]T, len(vals))
	for i, v := range vals {
		s[i] = conv(v)
	}
	return comm.Host(s)
}

// rankGrads are rank r's gradients of the given lengths, rank-distinct
// small integers (so that every sum is exact in every dtype and the
// reduced result does not depend on the order of summation).
func rankGrads(dt comm.DType, lens []int, r int) []comm.Buffer {
	out := make([]comm.Buffer, len(lens))
	for i, n := range lens {
		vals := make([]float64, n)
		for k := range vals {
			vals[k] = val(r, i, k)
		}
		out[i] = values(dt, vals)
	}
	return out
}

// val is element k of rank r's gradient i.
func val(r, i, k int) float64 { return float64((r*7+i*3+k*5)%13 - 6) }

// clone copies a host buffer.
func clone(b comm.Buffer) comm.Buffer {
	out, err := comm.HostBytes(b.DType(), bytes.Clone(b.Bytes()))
	if err != nil {
		panic(err)
	}
	return out
}

// TestReducerMatchesAllReduce: on 1, 2, 3 and 4 ranks with rank-distinct
// gradients of several dtypes — lengths that make buckets close mid-list, a
// gradient larger than the cap, empty gradients — a Reducer's steps give
// every gradient, bit for bit, what an AllReduce of that gradient alone
// gives (Avg on the float dtypes, Sum on i32, which is also checked
// against the sum computed here), with the gradients made ready in a
// different order on each rank, and again on a second and third step.
func TestReducerMatchesAllReduce(t *testing.T) {
	lens := []int{5, 3, 0, 17, 1, 4, 9, 2}
	for _, dt := range []comm.DType{comm.F32, comm.F64, comm.F16, comm.BF16, comm.I32} {
		op := comm.Avg
		if !dt.IsFloat() {
			op = comm.Sum
		}
		for n := 1; n <= 4; n++ {
			t.Run(fmt.Sprintf("%v/%d", dt, n), func(t *testing.T) {
				ctx := ctxT(t)
				cs := world(t, n)
				opt := dp.Options{BucketBytes: 6 * dt.Size(), Op: op} // grad 3 (17) is larger than a bucket
				noErrors(t, each(cs, func(r int, c comm.Communicator) error {
					grads := rankGrads(dt, lens, r)
					red, err := dp.NewReducer(c, grads, opt)
					if err != nil {
						return err
					}
					if got := len(red.Buckets()); got < 4 {
						return fmt.Errorf("%d buckets, want several: %v", got, red.Buckets())
					}
					order := rand.New(rand.NewPCG(uint64(r), 1)).Perm(len(grads))
					for step := range 3 {
						want := make([]comm.Buffer, len(grads))
						for i, g := range grads {
							want[i] = clone(g)
							if err := c.AllReduce(ctx, want[i], want[i], op); err != nil {
								return fmt.Errorf("step %d: reference AllReduce of grad %d: %w", step, i, err)
							}
						}
						if dt == comm.I32 && step == 0 {
							for i, l := range lens {
								sum := make([]float64, l)
								for q := range n {
									for k := range l {
										sum[k] += val(q, i, k)
									}
								}
								if !bytes.Equal(values(comm.I32, sum).Bytes(), want[i].Bytes()) {
									return fmt.Errorf("the reference Sum of grad %d is not the sum", i)
								}
							}
						}
						for _, i := range order {
							red.Ready(ctx, i)
						}
						if err := red.Wait(); err != nil {
							return fmt.Errorf("step %d: %w", step, err)
						}
						for i, g := range grads {
							if !bytes.Equal(g.Bytes(), want[i].Bytes()) {
								return fmt.Errorf("step %d: grad %d differs from its AllReduce alone", step, i)
							}
						}
					}
					return nil
				}))
			})
		}
	}
}

// TestReducerPreMulSum: with Op PreMulSum each rank's gradients are scaled
// by its own factor before the sum: a Reducer's step gives every gradient
// Σ factor_r × grad_r, exactly (the factors are powers of two).
func TestReducerPreMulSum(t *testing.T) {
	lens := []int{5, 3, 0, 17}
	factor := func(r int) float64 { return []float64{0.5, 2, -1}[r] }
	ctx := ctxT(t)
	cs := world(t, 3)
	noErrors(t, each(cs, func(r int, c comm.Communicator) error {
		grads := rankGrads(comm.F32, lens, r)
		red, err := dp.NewReducer(c, grads, dp.Options{BucketBytes: 24, Op: comm.PreMulSum, Scalar: factor(r)})
		if err != nil {
			return err
		}
		for i := range grads {
			red.Ready(ctx, i)
		}
		if err := red.Wait(); err != nil {
			return err
		}
		for i, l := range lens {
			want := make([]float64, l)
			for q := range 3 {
				for k := range l {
					want[k] += factor(q) * val(q, i, k)
				}
			}
			if !bytes.Equal(grads[i].Bytes(), values(comm.F32, want).Bytes()) {
				return fmt.Errorf("grad %d is not Σ factor × grad", i)
			}
		}
		return nil
	}))
}

// TestBucketsLayout: buckets hold consecutive gradients of one dtype in
// backward order (the last first), close before the gradient that would
// pass the cap (a larger one gets its own), run in place on a single
// gradient or on adjacent views of Options.Flat, and are packed otherwise.
func TestBucketsLayout(t *testing.T) {
	f := func(n int) comm.Buffer { return comm.Host(make([]float32, n)) }
	d := func(n int) comm.Buffer { return comm.Host(make([]float64, n)) }
	flat := make([]float32, 30)
	view := func(off, n int) comm.Buffer { return comm.Host(flat[off : off+n]) }
	for _, c := range []struct {
		name  string
		grads []comm.Buffer
		opt   dp.Options
		want  []dp.Bucket
	}{
		{"one bucket", []comm.Buffer{f(2), f(3)}, dp.Options{}, []dp.Bucket{{First: 0, Last: 1, DType: comm.F32, Len: 5, Packed: true}}},
		{"cap splits mid-list", []comm.Buffer{f(2), f(3), f(1), f(4)}, dp.Options{BucketBytes: 20}, []dp.Bucket{
			{First: 2, Last: 3, DType: comm.F32, Len: 5, Packed: true},
			{First: 0, Last: 1, DType: comm.F32, Len: 5, Packed: true},
		}},
		{"larger than the cap", []comm.Buffer{f(1), f(9), f(1)}, dp.Options{BucketBytes: 8}, []dp.Bucket{
			{First: 2, Last: 2, DType: comm.F32, Len: 1},
			{First: 1, Last: 1, DType: comm.F32, Len: 9},
			{First: 0, Last: 0, DType: comm.F32, Len: 1},
		}},
		{"dtypes apart", []comm.Buffer{f(1), f(1), d(1), f(1)}, dp.Options{}, []dp.Bucket{
			{First: 3, Last: 3, DType: comm.F32, Len: 1},
			{First: 2, Last: 2, DType: comm.F64, Len: 1},
			{First: 0, Last: 1, DType: comm.F32, Len: 2, Packed: true},
		}},
		{"empty gradients", []comm.Buffer{f(0), f(3), f(0)}, dp.Options{}, []dp.Bucket{{First: 0, Last: 2, DType: comm.F32, Len: 3}}},
		{"views of Flat", []comm.Buffer{view(0, 10), view(10, 5), view(15, 15)}, dp.Options{BucketBytes: 60, Flat: comm.Host(flat)}, []dp.Bucket{
			{First: 2, Last: 2, DType: comm.F32, Len: 15},
			{First: 0, Last: 1, DType: comm.F32, Len: 15},
		}},
		{"not adjacent in Flat", []comm.Buffer{view(0, 10), view(11, 5)}, dp.Options{Flat: comm.Host(flat)}, []dp.Bucket{
			{First: 0, Last: 1, DType: comm.F32, Len: 15, Packed: true},
		}},
		{"device, not one view of Flat", []comm.Buffer{comm.Device(0x1000, 4, comm.F32, 0), comm.Device(0x2000, 4, comm.F32, 0)}, dp.Options{}, []dp.Bucket{
			{First: 0, Last: 1, DType: comm.F32, Len: 8, Grouped: true},
		}},
		{"none", nil, dp.Options{}, []dp.Bucket{}},
	} {
		red, err := dp.NewReducer(nil, c.grads, c.opt)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := red.Buckets(); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: buckets %v, want %v", c.name, got, c.want)
		}
	}
}

// TestReducerRefuses: Avg on integer gradients (the contract defines it on
// floats only), a missing gradient, a negative cap, and a bucket that
// mixes device and host gradients, each with an error that names it;
// device gradients that are adjacent views of Flat are one bucket, in
// place.
func TestReducerRefuses(t *testing.T) {
	for _, c := range []struct {
		name  string
		grads []comm.Buffer
		opt   dp.Options
		want  string
	}{
		{"avg on i32", []comm.Buffer{comm.Host(make([]float32, 2)), comm.Host(make([]int32, 2))}, dp.Options{}, "grads[1] (2×i32 on host): avg is not defined on integer dtype i32"},
		{"missing", []comm.Buffer{comm.Host(make([]float32, 2)), {}}, dp.Options{}, "grads[1] is missing"},
		{"negative cap", nil, dp.Options{BucketBytes: -1}, "Options.BucketBytes -1"},
		{"device and host", []comm.Buffer{comm.Device(0x1000, 4, comm.F32, 0), comm.Host(make([]float32, 4))}, dp.Options{}, "the bucket of grads[0..1] mixes device memory and host memory (grads[1], 4×f32 on host)"},
		{"premulsum without factor", nil, dp.Options{Op: comm.PreMulSum}, "Options.Scalar 0 with op premulsum"},
		{"factor without premulsum", nil, dp.Options{Scalar: 0.5}, "Options.Scalar 0.5 with op avg"},
		{"premulsum on i32", []comm.Buffer{comm.Host(make([]int32, 2))}, dp.Options{Op: comm.PreMulSum, Scalar: 2}, "premulsum is defined on float dtypes only"},
	} {
		_, err := dp.NewReducer(nil, c.grads, c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	red, err := dp.NewReducer(nil, []comm.Buffer{comm.Device(0x1000, 4, comm.F32, 0), comm.Device(0x1010, 4, comm.F32, 0)},
		dp.Options{Flat: comm.Device(0x1000, 8, comm.F32, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(red.Buckets()), fmt.Sprint([]dp.Bucket{{First: 0, Last: 1, DType: comm.F32, Len: 8}}); got != want {
		t.Errorf("device views of Flat: buckets %v, want %v", got, want)
	}
	if _, err := dp.NewReducer(nil, []comm.Buffer{comm.Host([]int32{1})}, dp.Options{Op: comm.Sum}); err != nil {
		t.Errorf("Sum on i32: %v", err)
	}
}

// TestReducerEmpty: a Reducer of no gradients, or of empty ones only, runs
// its steps (the empty gradients' bucket is an AllReduce of 0 elements on
// every rank), and a Wait with no step begun returns at once.
func TestReducerEmpty(t *testing.T) {
	ctx := ctxT(t)
	cs := world(t, 3)
	noErrors(t, each(cs, func(r int, c comm.Communicator) error {
		for _, grads := range [][]comm.Buffer{nil, {comm.Host([]float32{}), comm.Host([]float32{})}} {
			red, err := dp.NewReducer(c, grads, dp.Options{})
			if err != nil {
				return err
			}
			if err := red.Wait(); err != nil {
				return fmt.Errorf("Wait before any step: %v", err)
			}
			for range 2 {
				if err := red.AllReduce(ctx); err != nil {
					return err
				}
			}
		}
		return c.Barrier(ctx)
	}))
}

// TestReducerMissedReady: a gradient never marked Ready on one rank is
// reduced all the same (the ranks stay in step: the other ranks' Wait
// succeeds and the next collective runs), and that rank's Wait says which.
func TestReducerMissedReady(t *testing.T) {
	ctx := ctxT(t)
	cs := world(t, 2)
	errs := each(cs, func(r int, c comm.Communicator) error {
		grads := rankGrads(comm.F32, []int{3, 3, 3}, r)
		red, err := dp.NewReducer(c, grads, dp.Options{BucketBytes: 12})
		if err != nil {
			return err
		}
		red.Ready(ctx, 2)
		if r == 0 {
			red.Ready(ctx, 1)
			red.Ready(ctx, 0)
		} else {
			red.Ready(ctx, 0)
		}
		err = red.Wait()
		if err := c.Barrier(ctx); err != nil {
			return fmt.Errorf("the collective after the step: %v", err)
		}
		return err
	})
	if errs[0] != nil {
		t.Errorf("rank 0: %v", errs[0])
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "grads [1] were not marked Ready") {
		t.Errorf("rank 1: %v, want an error naming grad 1", errs[1])
	}
}

// TestReducerMismatch: ranks whose gradient lists differ (a longer last
// gradient on rank 1, or a gradient more) get an error on every rank, the
// communicator's mismatch, not a hang.
func TestReducerMismatch(t *testing.T) {
	for _, c := range []struct {
		name string
		lens [][]int // per rank
	}{
		{"a longer gradient", [][]int{{3, 3}, {3, 4}, {3, 3}}},
		{"a gradient more", [][]int{{3, 3}, {5, 3, 3}, {3, 3}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := ctxT(t)
			cs := world(t, 3)
			errs := each(cs, func(r int, cm comm.Communicator) error {
				red, err := dp.NewReducer(cm, rankGrads(comm.F32, c.lens[r], r), dp.Options{BucketBytes: 12})
				if err != nil {
					return err
				}
				if err := red.AllReduce(ctx); err != nil {
					return err
				}
				return dp.Identical(ctx, cm) // the next collective
			})
			for r, err := range errs {
				if !errors.Is(err, comm.ErrMismatch) {
					t.Errorf("rank %d: %v, want a mismatch", r, err)
				}
			}
		})
	}
}

// TestBroadcastAndIdentical: Broadcast gives every rank the root's
// parameters (several buffers, several dtypes), after which Identical
// holds; a rank that changes one bit is named by every rank's Identical.
func TestBroadcastAndIdentical(t *testing.T) {
	for n := 1; n <= 4; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ctx := ctxT(t)
			cs := world(t, n)
			root := n - 1
			errs := each(cs, func(r int, c comm.Communicator) error {
				params := append(rankGrads(comm.F32, []int{4, 0, 7}, r), rankGrads(comm.BF16, []int{3}, r)...)
				if err := dp.Broadcast(ctx, c, root, params...); err != nil {
					return err
				}
				want := append(rankGrads(comm.F32, []int{4, 0, 7}, root), rankGrads(comm.BF16, []int{3}, root)...)
				for i := range params {
					if !bytes.Equal(params[i].Bytes(), want[i].Bytes()) {
						return fmt.Errorf("params[%d] is not rank %d's", i, root)
					}
				}
				if err := dp.Identical(ctx, c, params...); err != nil {
					return err
				}
				if r == 1 {
					params[2].Bytes()[5] ^= 1
				}
				return dp.Identical(ctx, c, params...)
			})
			for r, err := range errs {
				switch {
				case n == 1 && err != nil:
					t.Errorf("rank %d: %v", r, err)
				case n > 1 && (err == nil || !strings.Contains(err.Error(), "the parameters of ranks [1] differ from rank 0's")):
					t.Errorf("rank %d: %v, want rank 1 named", r, err)
				}
			}
		})
	}
}

// TestIdenticalRefusesDeviceMemory: a rank that passes device memory is
// named on every rank, and no rank waits for it.
func TestIdenticalRefusesDeviceMemory(t *testing.T) {
	ctx := ctxT(t)
	cs := world(t, 2)
	errs := each(cs, func(r int, c comm.Communicator) error {
		p := comm.Host([]float32{1, 2})
		if r == 1 {
			p = comm.Device(0x1000, 2, comm.F32, 0)
		}
		return dp.Identical(ctx, c, p)
	})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "ranks [1] passed device memory") {
		t.Errorf("rank 0: %v", errs[0])
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "params[0] is 2×f32 on device 0") {
		t.Errorf("rank 1: %v", errs[1])
	}
}

// TestHash: Hash is FNV-1a of the bytes, one buffer after another, so
// cutting the same bytes into other buffers hashes alike.
func TestHash(t *testing.T) {
	a := []float32{1, 2, 3, 4}
	if dp.Hash(comm.Host(a)) != dp.Hash(comm.Host(a[:1]), comm.Host(a[1:])) {
		t.Error("the hash depends on how the bytes are cut")
	}
	if dp.Hash(comm.Host(a)) == dp.Hash(comm.Host([]float32{1, 2, 3, 5})) {
		t.Error("different bits hash alike")
	}
}
