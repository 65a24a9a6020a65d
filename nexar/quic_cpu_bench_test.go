package nexar

import (
	"context"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/quic-go/quic-go"
)

// Bytes per CPU-second of one direction of one pair over QUIC: nexar's
// transport (its frames on its streams), and a communicator's Send and
// Recv over it (network quic-only: matching, the copy into the posted
// buffer), against quic-go alone on one stream with the same TLS, windows
// and sockets, both sides in this
// process. CPU time is the process's (user + system, getrusage), so the
// figure holds on a busy machine better than a rate does:
//
//	go test -run '^$' -bench 'QUICCPU' -benchtime 200x -count 5 ./nexar/
//
// MB/cpu-s is the metric; nexar÷raw and sendrecv÷raw are the shares of
// quic-go's own ceiling that the transport and the communicator keep.
func BenchmarkQUICCPU(b *testing.B) {
	const chunk = 1 << 20
	b.Run("raw", func(b *testing.B) {
		conn, accepted := rawQUIC(b)
		s, err := conn.OpenUniStream()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Write([]byte{1}); err != nil { // the peer sees the stream
			b.Fatal(err)
		}
		peer := <-accepted
		if peer == nil {
			b.FailNow()
		}
		rs, err := peer.AcceptUniStream(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(rs, make([]byte, 1)); err != nil {
			b.Fatal(err)
		}
		streamCPU(b, s, rs, chunk)
	})
	b.Run("nexar", func(b *testing.B) { transportCPU(b, NewQUIC, "udp", chunk) })
	b.Run("sendrecv", func(b *testing.B) { sendRecvCPU(b, "quic-only", chunk) })
}

// sendRecvCPU measures the bytes per CPU-second of a communicator's
// chunk-sized Send and Recv between two ranks over network.
func sendRecvCPU(b *testing.B, network string, chunk int) {
	ctx := context.Background()
	cs, err := NewLocalWorld(ctx, 2, network, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	send, recv := make([]byte, chunk), make([]byte, chunk)
	b.SetBytes(int64(chunk))
	cpu := startCPU()
	b.ResetTimer()
	got := make(chan error, 1)
	go func() {
		var err error
		for range b.N {
			if err = cs[1].Recv(ctx, comm.Host(recv), 0, 0); err != nil {
				break
			}
		}
		got <- err
	}()
	for range b.N {
		if err := cs[0].Send(ctx, comm.Host(send), 1, 0); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		b.Fatal(err)
	}
	cpu.report(b, chunk)
}

// rawQUIC is a quic-go connection between two endpoints of this process
// with nexar's TLS, windows and sockets and nothing of nexar's: the dialed
// side, and the accepted side on the channel (nil if accepting failed).
// Everything is closed when b ends.
func rawQUIC(b *testing.B) (*quic.Conn, <-chan *quic.Conn) {
	b.Helper()
	ca, err := newJobCA(testJobKey, "quic-raw")
	if err != nil {
		b.Fatal(err)
	}
	leaf0, err := ca.issueLeaf(0)
	if err != nil {
		b.Fatal(err)
	}
	leaf1, err := ca.issueLeaf(1)
	if err != nil {
		b.Fatal(err)
	}
	conf := &quic.Config{
		InitialStreamReceiveWindow: quicStreamWindow, MaxStreamReceiveWindow: quicMaxStreamWindow,
		InitialConnectionReceiveWindow: quicConnWindow, MaxConnectionReceiveWindow: quicMaxConnWindow,
		MaxIncomingUniStreams: 4, MaxIncomingStreams: 4, MaxIdleTimeout: 30 * time.Second,
	}
	pc1, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	pc0, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	tr1, tr0 := &quic.Transport{Conn: pc1}, &quic.Transport{Conn: pc0}
	b.Cleanup(func() { tr0.Close(); tr1.Close() })
	ln, err := tr1.Listen(ca.serverTLS(leaf1, func(int) error { return nil }, nil), conf)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	ctx := context.Background()
	accepted := make(chan *quic.Conn, 1)
	go func() {
		conn, err := ln.Accept(ctx)
		if err != nil {
			b.Error(err)
			conn = nil
		}
		accepted <- conn
	}()
	conn, err := tr0.Dial(ctx, pc1.LocalAddr(), ca.clientTLS(leaf0, 1, nil), conf)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.CloseWithError(0, "") })
	return conn, accepted
}

// streamCPU measures the bytes per CPU-second of chunk-sized writes on w
// read from r, on a goroutine of their own.
func streamCPU(b *testing.B, w io.Writer, r io.Reader, chunk int) {
	msg := make([]byte, chunk)
	got := make(chan error, 1)
	b.SetBytes(int64(chunk))
	cpu := startCPU()
	b.ResetTimer()
	go func() {
		buf := make([]byte, chunk)
		var err error
		for range b.N {
			if _, err = io.ReadFull(r, buf); err != nil {
				break
			}
		}
		got <- err
	}()
	for range b.N {
		if _, err := w.Write(msg); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		b.Fatal(err)
	}
	cpu.report(b, chunk)
}

// transportCPU measures the bytes per CPU-second of chunk-sized frames
// from rank 0 to rank 1 of a transport of two ranks.
func transportCPU(b *testing.B, dial func(context.Context, NetConfig, Handler) (Transport, error), network string, chunk int) {
	cs := []*counter{{}, {}}
	cfg := baseConfig()
	cfg.FailureTimeout = 30 * time.Second
	trs := startMesh(b, dial, network, 2, cfg, []Handler{cs[0], cs[1]})
	msg := make([]byte, chunk)
	ctx := context.Background()
	b.SetBytes(int64(chunk))
	done := cs[1].expect(int64(b.N) * int64(chunk))
	cpu := startCPU()
	b.ResetTimer()
	for i := range b.N {
		if err := trs[0].Send(ctx, 1, Header{Kind: FrameData, Step: uint32(i)}, msg); err != nil {
			b.Fatal(err)
		}
	}
	<-done
	cpu.report(b, chunk)
}

// cpuClock reads this process's CPU time (user + system).
type cpuClock struct{ start time.Duration }

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuClock { return cpuClock{processCPU()} }

// report adds MB per CPU-second of n bytes per iteration.
func (c cpuClock) report(b *testing.B, n int) {
	if d := processCPU() - c.start; d > 0 {
		b.ReportMetric(float64(n)*float64(b.N)/1e6/d.Seconds(), "MB/cpu-s")
	}
}
