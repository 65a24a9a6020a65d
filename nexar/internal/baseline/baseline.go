// Package baseline is what nexar's benchmarks measure themselves against,
// shared by the runtime's (package nexar) and the transports'
// (nexar/transport/netmesh): the process's CPU time, for bytes per
// CPU-second, and a plain quic-go connection between two endpoints of
// the process, for the raw figures. Only benchmarks use it. It imports
// nothing of ours.
package baseline

import (
	"context"
	"crypto/tls"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// CPUClock reads this process's CPU time (user + system) from a start.
type CPUClock struct{ start time.Duration }

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// StartCPU starts a clock of the process's CPU time.
func StartCPU() CPUClock { return CPUClock{processCPU()} }

// Report adds to b the metric MB/cpu-s: n bytes per iteration over the
// CPU time since the clock started.
func (c CPUClock) Report(b *testing.B, n int) {
	if d := processCPU() - c.start; d > 0 {
		b.ReportMetric(float64(n)*float64(b.N)/1e6/d.Seconds(), "MB/cpu-s")
	}
}

// QUICPair is a quic-go connection between two endpoints of this process,
// on loopback, with the given TLS configurations and quic.Config and
// nothing else: the dialed side, and the accepted side on the channel
// (nil if accepting failed). Everything is closed when b ends.
func QUICPair(b testing.TB, server, client *tls.Config, conf *quic.Config) (*quic.Conn, <-chan *quic.Conn) {
	b.Helper()
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
	ln, err := tr1.Listen(server, conf)
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
	conn, err := tr0.Dial(ctx, pc1.LocalAddr(), client, conf)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.CloseWithError(0, "") })
	return conn, accepted
}
