package nexar

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
)

// BenchmarkSmallLatency splits the cost of an 8-byte exchange into layers,
// all in this process over loopback TCP, each against the same run's raw
// round trip: two goroutines ping-ponging 8 bytes on a plain net.Conn
// (Go's TCP, TCP_NODELAY), then nexar's transport (framing, the reader
// goroutine, the Handler), then a communicator's Send/Recv (matching,
// posted buffer, the op), then an AllReduce on 2 and on 4 ranks (the
// executor, the schedule, the reduction). Each layer reports µs per round
// trip (two for the 2-rank AllReduce: the exchange goes both ways at once,
// so one call is one round trip) and "xRTT", its time over the raw round
// trip measured just before it. Subtracting one layer from the next gives
// the budget table in docs/transports.md:
//
//	go test -run '^$' -bench SmallLatency -benchtime 3000x -count 5 ./nexar/
func BenchmarkSmallLatency(b *testing.B) {
	for _, network := range []string{"tcp", "quic"} {
		rawRTT := rawTCPRTT
		if network == "quic" {
			rawRTT = rawQUICRTT
		}
		b.Run(network+"/raw", func(b *testing.B) {
			rtt := rawRTT(b, b.N)
			b.ReportMetric(float64(rtt.Nanoseconds())/1e3, "µs/rtt")
		})
		b.Run(network+"/transport", func(b *testing.B) {
			ref := rawRTT(b, 2000)
			dial, net := NewTCP, "tcp"
			if network == "quic" {
				dial, net = NewQUIC, "udp"
			}
			pingPong(b, dial, net, 8)
			reportRTT(b, ref, 1)
		})
		b.Run(network+"/sendrecv", func(b *testing.B) {
			ref := rawRTT(b, 2000)
			cs := localWorld(b, 2, network)
			ctx := context.Background()
			b.ResetTimer()
			var wg sync.WaitGroup
			wg.Go(func() {
				buf := make([]byte, 8)
				for range b.N {
					if err := cs[1].Recv(ctx, comm.Host(buf), 0, 0); err != nil {
						b.Error(err)
						return
					}
					if err := cs[1].Send(ctx, comm.Host(buf), 0, 0); err != nil {
						b.Error(err)
						return
					}
				}
			})
			buf := make([]byte, 8)
			for range b.N {
				if err := cs[0].Send(ctx, comm.Host(buf), 1, 0); err != nil {
					b.Fatal(err)
				}
				if err := cs[0].Recv(ctx, comm.Host(buf), 1, 0); err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
			reportRTT(b, ref, 1)
		})
		b.Run(network+"/exchange", func(b *testing.B) {
			// Both ranks send to each other at once with Start, as the
			// bench's sendrecv does: a posted Recv and a Send written on
			// the caller's goroutine (startP2P). One exchange counts as
			// one round trip.
			ref := rawRTT(b, 2000)
			cs := localWorld(b, 2, network)
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
			reportRTT(b, ref, 1)
		})
		for _, ranks := range []int{2, 4} {
			b.Run(fmt.Sprintf("%s/allreduce%d", network, ranks), func(b *testing.B) {
				ref := rawRTT(b, 2000)
				cs := localWorld(b, ranks, network)
				b.ResetTimer()
				smallAllReduces(b, cs, b.N)
				reportRTT(b, ref, 1)
			})
		}
	}
}

// smallAllReduces runs n 8-byte AllReduces on every rank of cs at once.
func smallAllReduces(b *testing.B, cs []*Comm, n int) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() {
			v := []float32{float32(r), 1}
			for range n {
				if err := c.AllReduce(ctx, comm.Host(v), comm.Host(v), comm.Max); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// localWorld is a world of n ranks of this process over loopback, closed
// when b ends.
func localWorld(b testing.TB, n int, network string) []*Comm {
	b.Helper()
	cs, err := NewLocalWorld(context.Background(), n, network, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { CloseAll(cs) })
	return cs
}

// reportRTT reports µs per round trip (perOp round trips per iteration)
// and that time over ref.
func reportRTT(b *testing.B, ref time.Duration, perOp int) {
	per := b.Elapsed() / time.Duration(b.N*perOp)
	b.ReportMetric(float64(per.Nanoseconds())/1e3, "µs/rtt")
	b.ReportMetric(float64(per)/float64(ref), "xRTT")
}

// rawTCPRTT is the mean 8-byte round trip over n ping-pongs between two
// goroutines on a plain loopback TCP connection.
func rawTCPRTT(b *testing.B, n int) time.Duration {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	echo := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			echo <- err
			return
		}
		defer c.Close()
		buf := make([]byte, 8)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				echo <- nil
				return
			}
			if _, err := c.Write(buf); err != nil {
				echo <- err
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 8)
	start := time.Now()
	for range n {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
	d := time.Since(start)
	c.Close()
	if err := <-echo; err != nil {
		b.Fatal(err)
	}
	return d / time.Duration(n)
}

// rawQUICRTT is the mean 8-byte round trip over n ping-pongs between two
// goroutines on one stream of a plain quic-go connection (rawQUIC).
func rawQUICRTT(b *testing.B, n int) time.Duration {
	b.Helper()
	conn, accepted := rawQUIC(b)
	ctx := context.Background()
	s, err := conn.OpenStreamSync(ctx)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 8)
	if _, err := s.Write(buf); err != nil { // the peer sees the stream
		b.Fatal(err)
	}
	peer := <-accepted
	if peer == nil {
		b.FailNow()
	}
	echo := make(chan error, 1)
	go func() {
		ps, err := peer.AcceptStream(ctx)
		if err != nil {
			echo <- err
			return
		}
		buf := make([]byte, 8)
		for range n + 1 {
			if _, err := io.ReadFull(ps, buf); err != nil {
				echo <- err
				return
			}
			if _, err := ps.Write(buf); err != nil {
				echo <- err
				return
			}
		}
		echo <- nil
	}()
	if _, err := io.ReadFull(s, buf); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for range n {
		if _, err := s.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(s, buf); err != nil {
			b.Fatal(err)
		}
	}
	d := time.Since(start)
	if err := <-echo; err != nil {
		b.Fatal(err)
	}
	return d / time.Duration(n)
}
