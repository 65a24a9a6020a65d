package netmesh

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/tls"
	"encoding/binary"
	"net"
	"syscall"
	"testing"

	"github.com/hiercomm/hiercomm/nexar/internal/baseline"
)

// Bytes per CPU-second of one direction of one pair over the TLS lane, as
// BenchmarkQUICCPU measures QUIC: crypto/tls alone over a loopback TCP
// connection (raw: the lane's certificates, TLS 1.3 with its cipher, full
// records, the same socket buffers, 1 MiB writes), the TLS lane's
// transport (its frames), the default network's two lanes (NewLanes: the
// frames take the TLS lane), and plain TCP's transport for reference (a
// communicator's Send and Recv over the lanes is nexar's
// BenchmarkSendRecvCPU/quic):
//
//	go test -run '^$' -bench 'TLSLaneCPU' -benchtime 300x -count 5 ./nexar/transport/netmesh/
//
// MB/cpu-s is the metric; lane÷raw is the share of crypto/tls's own
// ceiling that the lane keeps. aes-gcm is the cipher's work alone, what
// no encrypted lane can shed: each MiB sealed and opened in TLS's 16 KiB
// records with AES-128-GCM, the suite the raw connection negotiates
// (checked there), on this goroutine.
func BenchmarkTLSLaneCPU(b *testing.B) {
	const chunk = 1 << 20
	b.Run("raw", func(b *testing.B) {
		w, r := rawTLS(b)
		if s := w.ConnectionState().CipherSuite; s != tls.TLS_AES_128_GCM_SHA256 {
			b.Logf("the raw connection negotiated %s, not the AES-128-GCM of aes-gcm", tls.CipherSuiteName(s))
		}
		streamCPU(b, w, r, chunk)
	})
	b.Run("aes-gcm", func(b *testing.B) { cipherCPU(b, chunk) })
	b.Run("lane", func(b *testing.B) { transportCPU(b, dialTLSLane, "tcp", chunk) })
	b.Run("lanes", func(b *testing.B) { transportCPU(b, NewLanes, "udp+tcp", chunk) })
	b.Run("tcp", func(b *testing.B) { transportCPU(b, NewTCP, "tcp", chunk) })
}

// cipherCPU measures the bytes per CPU-second of sealing and opening
// chunk bytes in 16 KiB records with AES-128-GCM.
func cipherCPU(b *testing.B, chunk int) {
	const record = 16 << 10
	blk, err := aes.NewCipher(make([]byte, 16))
	if err != nil {
		b.Fatal(err)
	}
	aead, err := cipher.NewGCM(blk)
	if err != nil {
		b.Fatal(err)
	}
	msg := make([]byte, chunk)
	sealed := make([]byte, 0, record+aead.Overhead())
	opened := make([]byte, 0, record)
	nonce := make([]byte, aead.NonceSize())
	b.SetBytes(int64(chunk))
	cpu := baseline.StartCPU()
	b.ResetTimer()
	for i := range b.N {
		for off := 0; off < chunk; off += record {
			binary.BigEndian.PutUint64(nonce[4:], uint64(i)<<32|uint64(off))
			sealed = aead.Seal(sealed[:0], nonce, msg[off:off+record], nil)
			if opened, err = aead.Open(opened[:0], nonce, sealed, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	cpu.Report(b, chunk)
}

// rawTLS is a TLS 1.3 connection over loopback TCP between two ends of
// this process, with the lane's certificates, configuration and socket
// buffers and nothing else of nexar's: the dialer's end and the
// acceptor's. Both are closed when b ends.
func rawTLS(b *testing.B) (*tls.Conn, *tls.Conn) {
	b.Helper()
	ca, err := newJobCA(testJobKey, "tls-raw")
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
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *tls.Conn, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			b.Error(err)
			accepted <- nil
			return
		}
		setSocketBuffers(mustRaw(b, c), DefaultSocketBuffer)
		conf := bulk(ca.serverTLS(leaf1, func(int) error { return nil }, nil))
		conf.SessionTicketsDisabled = true
		tc := tls.Server(c, conf)
		if err := tc.Handshake(); err != nil {
			b.Error(err)
			tc = nil
		}
		accepted <- tc
	}()
	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		b.Fatal(err)
	}
	setSocketBuffers(mustRaw(b, c), DefaultSocketBuffer)
	w := tls.Client(c, bulk(ca.clientTLS(leaf0, 1, nil)))
	if err := w.Handshake(); err != nil {
		b.Fatal(err)
	}
	r := <-accepted
	if r == nil {
		b.FailNow()
	}
	b.Cleanup(func() { w.Close(); r.Close() })
	return w, r
}

// mustRaw is c's raw connection.
func mustRaw(b *testing.B, c *net.TCPConn) syscall.RawConn {
	rc, err := c.SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	return rc
}
