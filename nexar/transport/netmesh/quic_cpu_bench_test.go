package netmesh

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/nexar/internal/baseline"
	"github.com/hiercomm/hiercomm/nexar/transport"
	"github.com/quic-go/quic-go"
)

// Bytes per CPU-second of one direction of one pair over QUIC: nexar's
// transport (its frames on its streams) against quic-go alone on one
// stream with the same TLS and windows, both sides in this process (a
// communicator's Send and Recv over it is nexar's BenchmarkSendRecvCPU).
// CPU time is the process's (user + system, getrusage), so the figure
// holds on a busy machine better than a rate does:
//
//	go test -run '^$' -bench 'QUICCPU' -benchtime 200x -count 5 ./nexar/transport/netmesh/
//
// MB/cpu-s is the metric; nexar÷raw is the share of quic-go's own
// ceiling that the transport keeps.
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
	return baseline.QUICPair(b, ca.serverTLS(leaf1, func(int) error { return nil }, nil), ca.clientTLS(leaf0, 1, nil), conf)
}

// streamCPU measures the bytes per CPU-second of chunk-sized writes on w
// read from r, on a goroutine of their own.
func streamCPU(b *testing.B, w io.Writer, r io.Reader, chunk int) {
	msg := make([]byte, chunk)
	got := make(chan error, 1)
	b.SetBytes(int64(chunk))
	cpu := baseline.StartCPU()
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
	cpu.Report(b, chunk)
}

// transportCPU measures the bytes per CPU-second of chunk-sized frames
// from rank 0 to rank 1 of a transport of two ranks.
func transportCPU(b *testing.B, dial func(context.Context, Config, transport.Handler) (transport.Transport, error), network string, chunk int) {
	cs := []*counter{{}, {}}
	cfg := baseConfig()
	cfg.FailureTimeout = 30 * time.Second
	trs := startMesh(b, dial, network, 2, cfg, []transport.Handler{cs[0], cs[1]})
	msg := make([]byte, chunk)
	ctx := context.Background()
	b.SetBytes(int64(chunk))
	done := cs[1].expect(int64(b.N) * int64(chunk))
	cpu := baseline.StartCPU()
	b.ResetTimer()
	for i := range b.N {
		if err := trs[0].Send(ctx, 1, transport.Header{Kind: transport.FrameData, Step: uint32(i)}, msg); err != nil {
			b.Fatal(err)
		}
	}
	<-done
	cpu.Report(b, chunk)
}
