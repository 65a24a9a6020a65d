package dp_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/dp"
	"github.com/hiercomm/hiercomm/nexar"
)

// deviceOnHost is a comm.Decorator that stands in for a device
// communicator over a host one: a device Buffer's pointer names a slice of
// mem, which the call runs on instead. It notes, per AllReduce, whether it
// came in a comm.Batch.
type deviceOnHost struct {
	mem map[uintptr][]float32

	mu      *sync.Mutex
	batched *[]bool
}

func (d deviceOnHost) Start(ctx context.Context, call comm.Call, c comm.Communicator) *comm.Work {
	d.mu.Lock()
	*d.batched = append(*d.batched, comm.BatchOf(ctx) != 0)
	d.mu.Unlock()
	call.Send, call.Recv = d.host(call.Send), d.host(call.Recv)
	return c.Start(ctx, call)
}

func (d deviceOnHost) host(b comm.Buffer) comm.Buffer {
	if b.OnHost() || b.IsZero() {
		return b
	}
	return comm.Host(d.mem[b.Ptr()])
}

func (deviceOnHost) Derive(comm.Communicator) comm.Decorator { return nil }

// TestReducerGroupsDeviceBuckets: device gradients that are not one view
// of Options.Flat make a grouped bucket, reduced as one comm.Batch of
// AllReduces in place, step after step (the batch is built once and
// started every step), with exact, rank-distinct sums.
func TestReducerGroupsDeviceBuckets(t *testing.T) {
	const size = 3
	lengths := []int{3, 0, 5, 2}
	world, err := nexar.NewMemoryWorld(size, nexar.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer nexar.CloseAll(world)
	// value is rank r's element j of gradient i at step s: small integers,
	// exact in f32, distinct across ranks, gradients and steps.
	value := func(s, r, i, j int) float32 { return float32(1000*s + 100*r + 10*i + j) }
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r, c := range world {
		wg.Go(func() {
			errs[r] = func() error {
				d := deviceOnHost{mem: map[uintptr][]float32{}, mu: new(sync.Mutex), batched: new([]bool)}
				grads := make([]comm.Buffer, len(lengths))
				for i, n := range lengths {
					ptr := uintptr(0x10000 * (i + 1))
					d.mem[ptr] = make([]float32, n)
					grads[i] = comm.Device(ptr, n, comm.F32, 0)
				}
				red, err := dp.NewReducer(comm.Wrap(c, d), grads, dp.Options{Op: comm.Sum})
				if err != nil {
					return err
				}
				if got, want := fmt.Sprint(red.Buckets()), fmt.Sprint([]dp.Bucket{{First: 0, Last: 3, DType: comm.F32, Len: 10, Grouped: true}}); got != want {
					return fmt.Errorf("buckets %v, want %v", got, want)
				}
				for s := range 2 {
					for i, n := range lengths {
						for j := range n {
							d.mem[uintptr(0x10000*(i+1))][j] = value(s, r, i, j)
						}
					}
					if err := red.AllReduce(context.Background()); err != nil {
						return fmt.Errorf("step %d: %w", s, err)
					}
					for i, n := range lengths {
						for j := range n {
							var want float32
							for q := range size {
								want += value(s, q, i, j)
							}
							if got := d.mem[uintptr(0x10000*(i+1))][j]; got != want {
								return fmt.Errorf("step %d: grads[%d][%d] = %v, want %v", s, i, j, got, want)
							}
						}
					}
				}
				// Two steps of one AllReduce per non-empty gradient, each
				// in the batch.
				if got, want := fmt.Sprint(*d.batched), fmt.Sprint([]bool{true, true, true, true, true, true}); got != want {
					return fmt.Errorf("the AllReduces came in a batch: %v, want %v", got, want)
				}
				return nil
			}()
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
