package nexar

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/nexar/internal/baseline"
	"github.com/hiercomm/hiercomm/nexar/transport"
	"github.com/hiercomm/hiercomm/nexar/transport/netmesh"
	"github.com/quic-go/quic-go"
)

// BenchmarkSmallLatency splits the cost of an 8-byte exchange into layers,
// all in this process over loopback TCP, each against the same run's raw
// round trip: two goroutines ping-ponging 8 bytes on a plain net.Conn
// (Go's TCP, TCP_NODELAY), then nexar's transport (nexar/transport/netmesh:
// framing, the reader goroutine, the Handler), then a communicator's Send/Recv (matching,
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
			transportPingPong(b, network)
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

// transportPingPong sends 8 bytes back and forth b.N times between the two
// ends of a network transport alone (netmesh.NewTCP for "tcp", and
// netmesh.NewQUIC for "quic": the small frames' lane), with no
// communicator above it.
func transportPingPong(b *testing.B, network string) {
	if network == "quic" {
		network = "quic-only"
	}
	sock, err := netmesh.SocketNetwork(network)
	if err != nil {
		b.Fatal(err)
	}
	cfgs, err := netmesh.LocalConfigs(sock, 2, NetConfig{JobKey: []byte("hiercomm-latency-bench-job-key!!"), JobID: "latency-bench", FailureTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	hs := []arrivals{make(arrivals, 1), make(arrivals, 1)}
	trs := make([]transport.Transport, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range trs {
		wg.Go(func() { trs[r], errs[r] = netmesh.New(context.Background(), network, cfgs[r], hs[r]) })
	}
	wg.Wait()
	b.Cleanup(func() {
		for _, tr := range trs {
			if tr != nil {
				tr.Close()
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	msg := make([]byte, 8)
	b.ResetTimer()
	for range b.N {
		if err := trs[0].Send(ctx, 1, transport.Header{Kind: transport.FrameP2P}, msg); err != nil {
			b.Fatal(err)
		}
		<-hs[1]
		if err := trs[1].Send(ctx, 0, transport.Header{Kind: transport.FrameP2P}, msg); err != nil {
			b.Fatal(err)
		}
		<-hs[0]
	}
}

// arrivals is a Handler that signals each frame it is given.
type arrivals chan struct{}

func (a arrivals) Deliver(_ int, _ transport.Header, p []byte) {
	transport.PutBuf(p)
	a <- struct{}{}
}

func (a arrivals) PeerFailed(int, error) {}

// rawQUIC is a quic-go connection between two endpoints of this process
// and nothing of nexar's (a self-signed Ed25519 certificate, as the job
// CA's leaves are; TLS 1.3; quic-go's flow-control windows, which 8-byte
// round trips never fill): baseline.QUICPair's two sides.
func rawQUIC(b *testing.B) (*quic.Conn, <-chan *quic.Conn) {
	b.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		b.Fatal(err)
	}
	const proto = "hiercomm-bench"
	server := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, NextProtos: []string{proto}, MinVersion: tls.VersionTLS13}
	client := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto}, MinVersion: tls.VersionTLS13}
	return baseline.QUICPair(b, server, client, &quic.Config{MaxIdleTimeout: 30 * time.Second})
}
