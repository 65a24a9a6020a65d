package shm

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
)

// BenchmarkSmallExchange times an 8-byte exchange between the two ranks
// of a node, goroutines of this process: each Starts a Send to the other
// and a Recv from it and waits for both, as the bench's sendrecv does.
// The ceiling it is reported against ("xflip") is two goroutines of this
// process handing a word back and forth through one atomic, spinning:
// the cost of the cache line's trip and nothing of ours.
//
//	go test -run '^$' -bench SmallExchange -benchtime 20000x -count 5 ./shm/
func BenchmarkSmallExchange(b *testing.B) {
	ref := atomicRoundTrip(20000)
	cs := localWorld(b, 2, Config{})
	ctx := context.Background()
	b.ResetTimer()
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() {
			if err := commtest.Exchange(ctx, c, 1-r, b.N, make([]byte, 8), make([]byte, 8)); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(per.Nanoseconds())/1e3, "µs/exchange")
	b.ReportMetric(float64(per)/float64(ref), "xflip")
}

// atomicRoundTrip is the time two spinning goroutines take to hand a
// counter back and forth once, the mean of n round trips.
func atomicRoundTrip(n int) time.Duration {
	var word atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := int64(1); i <= 2*int64(n); i += 2 {
			for word.Load() != i {
			}
			word.Store(i + 1)
		}
	}()
	start := time.Now()
	for i := int64(0); i < 2*int64(n); i += 2 {
		word.Store(i + 1)
		for word.Load() != i+2 {
		}
	}
	<-done
	return time.Since(start) / time.Duration(n)
}

// BenchmarkSmallBroadcast times back-to-back 8-byte Broadcasts from rank 0
// among 4 ranks, goroutines of this process, as the bench's broadcast does
// (the time per call is the slowest rank's): eager (the default) and
// staged (Config.EagerBytes negative).
//
//	go test -run '^$' -bench SmallBroadcast -benchtime 20000x -count 5 ./shm/
func BenchmarkSmallBroadcast(b *testing.B) {
	for _, tc := range []struct {
		name  string
		eager int
	}{{"eager", 0}, {"staged", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			cs := localWorld(b, 4, Config{EagerBytes: tc.eager})
			ctx := context.Background()
			b.ResetTimer()
			var wg sync.WaitGroup
			for _, c := range cs {
				wg.Go(func() {
					buf := make([]byte, 8)
					for range b.N {
						if err := c.Broadcast(ctx, comm.Host(buf), 0); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "µs/call")
		})
	}
}
