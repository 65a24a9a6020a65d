package nexar_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar"
)

// BenchmarkAllReduceVsSendRecv measures, in one process and one run, the
// ring AllReduce's bus bandwidth next to the sendrecv ring's (each rank
// sends to r+1 and receives from r−1 at once, the transport's ceiling for a
// ring), for each segment size. MB/s is bus bandwidth per rank:
// 2(P−1)/P · bytes for AllReduce, bytes for sendrecv.
//
//	go test -run '^$' -bench AllReduceVsSendRecv -benchtime 5x ./nexar/
func BenchmarkAllReduceVsSendRecv(b *testing.B) {
	const ranks, n = 2, 16 << 20 / 4 // 16 MiB of f32
	for _, network := range []string{"tcp", "quic"} {
		for _, seg := range []int{256 << 10, 1 << 20, 4 << 20} {
			cs, err := nexar.NewLocalWorld(context.Background(), ranks, network, nexar.Options{SegmentBytes: seg})
			if err != nil {
				b.Fatal(err)
			}
			bufs := make([][]float32, ranks)
			recvs := make([][]float32, ranks)
			for r := range bufs {
				bufs[r] = make([]float32, n)
				recvs[r] = make([]float32, n)
			}
			each := func(b *testing.B, f func(r int, c *nexar.Comm) error) {
				for range b.N {
					var wg sync.WaitGroup
					for r, c := range cs {
						wg.Add(1)
						go func() {
							defer wg.Done()
							if err := f(r, c); err != nil {
								b.Error(err)
							}
						}()
					}
					wg.Wait()
				}
			}
			ctx := context.Background()
			b.Run(fmt.Sprintf("%s/seg=%dK/sendrecv", network, seg>>10), func(b *testing.B) {
				b.SetBytes(4 * n)
				each(b, func(r int, c *nexar.Comm) error {
					w := c.Start(ctx, comm.Call{Kind: comm.KindSend, Send: comm.Host(bufs[r]), Peer: (r + 1) % ranks})
					return errorsJoin(c.Recv(ctx, comm.Host(recvs[r]), (r+ranks-1)%ranks, 0), w.Wait())
				})
			})
			b.Run(fmt.Sprintf("%s/seg=%dK/allreduce", network, seg>>10), func(b *testing.B) {
				b.SetBytes(2 * (ranks - 1) * 4 * n / ranks)
				each(b, func(r int, c *nexar.Comm) error {
					return c.AllReduce(ctx, comm.Host(bufs[r]), comm.Host(recvs[r]), comm.Sum)
				})
			})
			nexar.CloseAll(cs)
		}
	}
}

func errorsJoin(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
