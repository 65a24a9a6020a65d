package comm_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar"
)

// recorder is a Decorator that notes the signature of every call that
// reaches the communicator.
type recorder struct {
	mu    *sync.Mutex
	calls *[]string
}

func (d recorder) Start(ctx context.Context, call comm.Call, c comm.Communicator) *comm.Work {
	d.mu.Lock()
	*d.calls = append(*d.calls, call.Signature().String())
	d.mu.Unlock()
	return c.Start(ctx, call)
}

func (recorder) Derive(comm.Communicator) comm.Decorator { return nil }

// TestBatchFusesSmallAllReduces: on a communicator that runs a batch call
// by call, AllReduces that follow one another on host memory, of one
// dtype and op and at most 4 KiB each, reach it as one AllReduce; a larger
// one, another op, another kind or a Send between them cut the run; the
// results are each call's own, in place and not.
func TestBatchFusesSmallAllReduces(t *testing.T) {
	const size = 2
	world, err := nexar.NewMemoryWorld(size, nexar.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer nexar.CloseAll(world)
	calls := make([][]string, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r, c := range world {
		wg.Go(func() {
			errs[r] = func() error {
				rc := comm.Wrap(c, recorder{new(sync.Mutex), &calls[r]})
				v := float32(r + 1) // rank 0 adds 1, rank 1 adds 2: sums of 3
				a, b, out := []float32{v, v, v}, []float32{10 * v, 10 * v}, make([]float32, 2)
				big := make([]float32, 1025) // 4100 bytes: not fused
				m := []float32{v}
				i, j := []int64{int64(r), 7}, []int64{5, int64(r)}
				var batch comm.Batch
				batch.AllReduce(comm.Host(a), comm.Host(a), comm.Sum)
				batch.AllReduce(comm.Host(b), comm.Host(out), comm.Sum)
				batch.AllReduce(comm.Host(big), comm.Host(big), comm.Sum)
				batch.AllReduce(comm.Host(m), comm.Host(m), comm.Max)
				batch.AllReduce(comm.Host(i), comm.Host(i), comm.Sum)
				batch.Send(comm.Host([]float32{v}), r, 1) // not m: the Max AllReduce may be writing it (Batch: no call reads what another writes)
				batch.Recv(comm.Host(make([]float32, 1)), r, 1)
				batch.AllReduce(comm.Host(j), comm.Host(j), comm.Sum)
				if err := batch.Run(context.Background(), rc); err != nil {
					return err
				}
				want := fmt.Sprintf("[3 3 3] [%v %v] [30 30] [2] [1 14] [10 1]", 10*v, 10*v)
				if got := fmt.Sprint(a, b, out, m, i, j); got != want {
					return fmt.Errorf("results %s, want %s", got, want)
				}
				return nil
			}()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	want := "[AllReduce(5×f32, sum) AllReduce(1025×f32, sum) AllReduce(1×f32, max) AllReduce(2×i64, sum) Send() Recv() AllReduce(2×i64, sum)]"
	for r := range size {
		if got := fmt.Sprint(calls[r]); got != want {
			t.Errorf("rank %d: the communicator saw %s; want %s", r, got, want)
		}
	}
}
