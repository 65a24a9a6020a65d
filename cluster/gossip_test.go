package cluster

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hiercomm/hiercomm/topology"
)

// lockedLog collects a test's log lines from every goroutine; the test
// prints them if it fails.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// clusterLogger is a logger at level for t, printed if t fails.
func clusterLogger(t *testing.T, level slog.Level) (*slog.Logger, *lockedLog) {
	t.Helper()
	buf := new(lockedLog)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", buf)
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level})), buf
}

// bindLoopback binds gossip sockets on ip with a kernel-chosen port.
func bindLoopback(t *testing.T, ip string) Sockets {
	t.Helper()
	s, err := BindGossip(ip, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestGossipTransportRoundTrip(t *testing.T) {
	log, _ := clusterLogger(t, slog.LevelDebug)
	a, err := newGossipTransport(bindLoopback(t, "127.0.0.1"), log)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown()
	// Another loopback address: the dial must leave from it.
	b, err := newGossipTransport(bindLoopback(t, "127.0.0.2"), log)
	if err != nil {
		t.Skipf("127.0.0.2 is not usable here: %v", err)
	}
	defer b.Shutdown()

	ip, port, err := b.FinalAdvertiseAddr("", 0)
	if err != nil || !ip.Equal(net.ParseIP("127.0.0.2")) || port != b.port {
		t.Fatalf("FinalAdvertiseAddr = %v, %d, %v; want 127.0.0.2, %d", ip, port, err, b.port)
	}

	t.Run("packet", func(t *testing.T) {
		before := time.Now()
		if _, err := b.WriteTo([]byte("ping"), a.addr()); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-a.PacketCh():
			if string(p.Buf) != "ping" || p.From.String() != b.addr() || p.Timestamp.Before(before) {
				t.Fatalf("got %q from %v at %v; want \"ping\" from %s after %v", p.Buf, p.From, p.Timestamp, b.addr(), before)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no packet")
		}
	})

	t.Run("stream", func(t *testing.T) {
		conn, err := b.DialTimeout(a.addr(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var in net.Conn
		select {
		case in = <-a.StreamCh():
		case <-time.After(5 * time.Second):
			t.Fatal("no stream")
		}
		defer in.Close()
		if got := in.RemoteAddr().(*net.TCPAddr).IP; !got.Equal(net.ParseIP("127.0.0.2")) {
			t.Errorf("the stream comes from %v; want the dialer's bound IP 127.0.0.2", got)
		}
		if _, err := conn.Write([]byte("push")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(in, buf); err != nil || string(buf) != "push" {
			t.Fatalf("read %q, %v", buf, err)
		}
		if _, err := in.Write([]byte("pull")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "pull" {
			t.Fatalf("read %q, %v", buf, err)
		}
		if r, ok := b.lastDial(a.addr()); !ok || r.err != nil {
			t.Errorf("lastDial = %+v, %v; want a successful dial", r, ok)
		}
	})

	t.Run("refused dial is recorded", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := ln.Addr().String()
		ln.Close()
		if _, err := b.DialTimeout(dead, time.Second); err == nil {
			t.Fatal("dial to a closed port succeeded")
		}
		if r, ok := b.lastDial(dead); !ok || r.err == nil || unroutable(r.err) {
			t.Errorf("lastDial = %+v, %v; want a refused (retryable) dial", r, ok)
		}
	})

	t.Run("shutdown", func(t *testing.T) {
		if err := b.Shutdown(); err != nil {
			t.Fatal(err)
		}
		if err := b.Shutdown(); err != nil {
			t.Fatalf("second Shutdown: %v", err)
		}
		if _, err := b.WriteTo([]byte("x"), a.addr()); err != nil {
			t.Errorf("WriteTo after Shutdown: %v; want the packet dropped quietly", err)
		}
		// The port is free again: both sockets were closed.
		s, err := BindGossip("127.0.0.2", b.port)
		if err != nil {
			t.Fatalf("rebinding the port after Shutdown: %v", err)
		}
		s.Close()
	})
}

func TestGossipTransportRejectsSockets(t *testing.T) {
	log, _ := clusterLogger(t, slog.LevelInfo)
	s1 := bindLoopback(t, "127.0.0.1")
	defer s1.Close()
	s2 := bindLoopback(t, "127.0.0.1")
	defer s2.Close()
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{})
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{Port: tcp.Addr().(*net.TCPAddr).Port})
	if err != nil {
		tcp.Close()
		t.Skipf("cannot bind the unspecified address: %v", err)
	}
	unspecified := Sockets{TCP: tcp, UDP: udp}
	defer unspecified.Close()
	for _, tc := range []struct {
		name string
		s    Sockets
		want string
	}{
		{"no UDP", Sockets{TCP: s1.TCP}, "both"},
		{"ports differ", Sockets{TCP: s1.TCP, UDP: s2.UDP}, "share one IP and port"},
		{"unspecified", unspecified, "unspecified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := newGossipTransport(tc.s, log); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want one that says %q", err, tc.want)
			}
		})
	}
}

func TestBindGossip(t *testing.T) {
	s := bindLoopback(t, "127.0.0.1")
	defer s.Close()
	if s.TCP.Addr().(*net.TCPAddr).Port != s.UDP.LocalAddr().(*net.UDPAddr).Port {
		t.Fatalf("TCP %v and UDP %v ports differ", s.TCP.Addr(), s.UDP.LocalAddr())
	}
	port := s.TCP.Addr().(*net.TCPAddr).Port
	for _, tc := range []struct {
		name, ip string
		port     int
		want     string
	}{
		{"host name", "localhost", 0, "not an IP"},
		{"unspecified", "0.0.0.0", 0, "unspecified"},
		{"bad port", "127.0.0.1", 70000, "not in"},
		{"port in use", "127.0.0.1", port, "HIERCOMM_PORT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := BindGossip(tc.ip, tc.port); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("BindGossip(%q, %d) = %v; want an error that says %q", tc.ip, tc.port, err, tc.want)
			}
		})
	}
}

func TestBindData(t *testing.T) {
	for _, network := range []string{"quic", "quic-only", "tcp"} {
		d, err := BindData(network, "127.0.0.1", 0)
		if err != nil {
			t.Fatal(err)
		}
		if (d.Packet != nil) != (network != "tcp") || (d.Listener != nil) != (network != "quic-only") || !strings.HasPrefix(d.Addr, "127.0.0.1:") {
			t.Errorf("BindData(%q) = %+v", network, d)
		}
		// Network quic: QUIC and its TLS lane on the same port.
		if d.Packet != nil && d.Listener != nil && d.Packet.LocalAddr().String() != d.Listener.Addr().String() {
			t.Errorf("BindData(quic): UDP on %v, TCP on %v; want the same port", d.Packet.LocalAddr(), d.Listener.Addr())
		}
		d.Close()
	}
	if _, err := BindData("udp", "127.0.0.1", 0); err == nil || !strings.Contains(err.Error(), "HIERCOMM_NETWORK") {
		t.Errorf("BindData(udp) = %v; want an error naming HIERCOMM_NETWORK", err)
	}
}

func TestMeta(t *testing.T) {
	m := topology.Member{Rank: 3, Host: "node-7", Local: 1, Device: 1, Addr: "10.0.0.7:29600"}
	b, err := encodeMeta("train-42", m, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	job, got, _, err := decodeMeta(b)
	if err != nil || job != "train-42" || got != m {
		t.Fatalf("round trip: %q, %+v, %v; want train-42, %+v", job, got, err, m)
	}

	// The largest metadata Config allows (a job id of 128 bytes, a long
	// host id, an IPv6 address) fits; a host id that does not is refused.
	big := topology.Member{Rank: 1 << 20, Host: strings.Repeat("h", 250), Local: 999, Device: 999,
		Addr: "[2001:db8:ffff:ffff:ffff:ffff:ffff:ffff]:65535"}
	if b, err := encodeMeta(strings.Repeat("j", maxJobIDLen), big, nil, false); err != nil || len(b) > memberlist.MetaMaxSize {
		t.Errorf("a 250-byte host id: %d bytes, %v; want it to fit in %d", len(b), err, memberlist.MetaMaxSize)
	}
	big.Host = strings.Repeat("h", 400)
	if _, err := encodeMeta("job", big, nil, false); err == nil || !strings.Contains(err.Error(), "host id (400 bytes)") {
		t.Errorf("a 400-byte host id: %v; want an error naming the host id's length", err)
	}

	for _, tc := range []struct {
		name, meta string
		want       string
		version    bool
	}{
		{"empty", "", "no member metadata", false},
		{"not json", "{", "not valid", false},
		{"newer version", `{"v":2,"job":"j","host":"h"}`, "version 2", true},
		{"no version", `{"job":"j","host":"h"}`, "version 0", true},
		{"no job", `{"v":1,"host":"h"}`, "no job id", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := decodeMeta([]byte(tc.meta))
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, errMetaVersion) != tc.version {
				t.Fatalf("decodeMeta(%s) = %v; want an error with %q (version error: %v)", tc.meta, err, tc.want, tc.version)
			}
		})
	}
	// Fields added within a version are ignored.
	if _, got, _, err := decodeMeta([]byte(`{"v":1,"job":"j","rank":-1,"host":"h","local":2,"device":-1,"zone":"x"}`)); err != nil || got.Local != 2 || got.Rank != -1 {
		t.Errorf("unknown field: %+v, %v", got, err)
	}
}

func TestMemberlistLog(t *testing.T) {
	log, buf := clusterLogger(t, slog.LevelDebug)
	w := newMemberlistLog(log)
	for _, line := range []string{
		"[ERR] memberlist: failed to receive: No installed keys could decrypt the message\n",
		"[WARN] memberlist: Refuting a suspect message\n",
		"[INFO] memberlist: Suspect x has failed\n",
		"[DEBUG] memberlist: Initiating push/pull sync\n",
		"unprefixed\n",
	} {
		if n, err := w.Write([]byte(line)); n != len(line) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	for _, want := range []string{
		`level=WARN msg="memberlist: failed to receive: No installed keys could decrypt the message" component=memberlist`,
		`level=WARN msg="memberlist: Refuting a suspect message"`,
		`level=DEBUG msg="memberlist: Suspect x has failed"`,
		`level=DEBUG msg="memberlist: Initiating push/pull sync"`,
		`level=DEBUG msg=unprefixed`,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %s", want)
		}
	}
}
