package comm_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar"
)

// tracer is a Decorator that logs every call of its rank before it runs.
type tracer struct {
	mu  *sync.Mutex
	log *[]string
}

func (t tracer) Start(ctx context.Context, call comm.Call, c comm.Communicator) *comm.Work {
	t.mu.Lock()
	*t.log = append(*t.log, fmt.Sprintf("rank %d of %d: %v", c.Rank(), c.Size(), call.Signature()))
	t.mu.Unlock()
	return c.Start(ctx, call)
}

// Derive traces the communicators that Split and Shrink make, too.
func (t tracer) Derive(comm.Communicator) comm.Decorator { return t }

// Wrap decorates a communicator without losing any of its capabilities:
// here a tracer sees every call (the blocking ones included), and Abort,
// the census and Shrink still reach the communicator it wraps.
func ExampleWrap() {
	world, err := nexar.NewMemoryWorld(2, nexar.Options{Timeout: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	var log []string
	var wg sync.WaitGroup
	for r, c := range world {
		traced := comm.Wrap(c, tracer{&mu, &log})
		wg.Go(func() {
			defer traced.Close()
			x := []float32{float32(r + 1)}
			if err := traced.AllReduce(context.Background(), comm.Host(x), comm.Host(x), comm.Sum); err != nil {
				panic(err)
			}
			// The child, its ranks in reverse order, is traced too.
			rev, err := traced.Split(context.Background(), 0, -r)
			if err != nil {
				panic(err)
			}
			defer rev.Close()
			if err := rev.Barrier(context.Background()); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	slices.Sort(log)
	for _, line := range log {
		fmt.Println(line)
	}
	// Output:
	// rank 0 of 2: AllReduce(1×f32, sum)
	// rank 0 of 2: Barrier()
	// rank 1 of 2: AllReduce(1×f32, sum)
	// rank 1 of 2: Barrier()
}
