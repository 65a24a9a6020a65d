package netmesh

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hiercomm/hiercomm/comm/tier"
)

// Config configures a network transport (NewQUIC, NewTCP, NewLanes; in a
// nexar.Config it is nexar.NetConfig, whose name its errors use). Addrs
// and JobKey are required; every other field left zero takes the default
// its comment gives. The constructors work on a validated copy; the
// caller's struct is never modified.
type Config struct {
	// Rank is this process's rank, in [0, len(Addrs)). If zero, this is
	// rank 0.
	Rank int
	// Addrs is every rank's host:port, in rank order; Addrs[Rank] is the
	// address this rank listens on (unless PacketConn or Listener is set)
	// and the others are dialed. Every rank must be given the same list.
	Addrs []string
	// JobKey is the secret every rank of the job shares; at least 16 bytes.
	// Required. Peers are authenticated with keys derived from it (see
	// jobca.go), so a process without it can neither connect nor accept.
	JobKey []byte
	// JobID names the job; it is bound into every certificate, so ranks of
	// different jobs never connect even if they share a key. Letters,
	// digits, '.', '_', '-' and '~' only. If empty, defaults to "hiercomm".
	JobID string
	// FailureTimeout is how long a peer may stay silent before it is
	// declared failed (QUIC idle timeout; TCP keepalive and user timeout),
	// tier.Timeouts.FailureTimeout on the network. Keepalives are sent
	// every FailureTimeout/3. Every rank must use the same. If zero,
	// defaults to DefaultFailureTimeout (10s).
	FailureTimeout time.Duration
	// ConnectTimeout bounds the formation of the whole mesh
	// (tier.Timeouts.ConnectTimeout): the constructor fails if some peer
	// is still missing after it. If zero, defaults to
	// DefaultConnectTimeout (60s).
	ConnectTimeout time.Duration
	// ConnsPerPeer is the number of connections to each peer. Frames are
	// spread over them round-robin. Every rank must use the same value. If
	// zero, defaults to 1.
	ConnsPerPeer int
	// PacketConn, for NewQUIC, is an already-bound UDP socket to use instead
	// of listening on Addrs[Rank], for launchers that bind ports early and
	// hand them to their children (no port races). The transport takes it
	// over and closes it on Close. If nil, NewQUIC binds Addrs[Rank].
	PacketConn net.PacketConn
	// Listener, for NewTCP, is likewise an already-bound TCP listener. The
	// transport takes it over and closes it once the mesh is formed. If
	// nil, NewTCP listens on Addrs[Rank].
	Listener net.Listener
	// SocketBuffer is the receive and send buffer size asked of the kernel
	// for each socket. If the kernel grants less, the transport logs once
	// per process how to raise the limit. If zero, defaults to 8 MiB.
	SocketBuffer int
	// Logger receives the transport's warnings and debug events. If nil,
	// defaults to slog.Default().
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultJobID          = "hiercomm"
	DefaultFailureTimeout = tier.NetworkFailureTimeout // tier.DefaultTimeouts(tier.Network)
	DefaultConnectTimeout = tier.DefaultConnectTimeout
	DefaultSocketBuffer   = 8 << 20
	maxConnsPerPeer       = 64
)

// validate returns a copy of c with defaults filled in, or an error that
// names the field that is wrong.
// WithDefaults is c with its defaults filled in, or the error the
// transports' constructors give for c (it reads PacketConn and Listener
// only to check them): for a caller that must compare configurations
// before it connects (nexar's Comm.Grow).
func (c Config) WithDefaults() (Config, error) { return c.validate() }

func (c Config) validate() (Config, error) {
	bad := func(format string, a ...any) (Config, error) {
		return Config{}, fmt.Errorf("nexar: invalid NetConfig: "+format, a...)
	}
	if len(c.Addrs) == 0 {
		return bad("Addrs is empty: it must list every rank's host:port")
	}
	if c.Rank < 0 || c.Rank >= len(c.Addrs) {
		return bad("Rank %d is not in [0, %d) (len(Addrs))", c.Rank, len(c.Addrs))
	}
	for i, a := range c.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return bad("Addrs[%d] = %q is not host:port: %v", i, a, err)
		}
	}
	if len(c.JobKey) < minJobKeyLen {
		return bad("JobKey has %d bytes, need at least %d (every rank must share the same random key)", len(c.JobKey), minJobKeyLen)
	}
	if c.JobID == "" {
		c.JobID = DefaultJobID
	}
	if !validJobID(c.JobID) {
		return bad("JobID %q: use 1 to 128 letters, digits, '.', '_', '-' or '~' (it is bound into certificates)", c.JobID)
	}
	if c.FailureTimeout < 0 || c.ConnectTimeout < 0 || c.ConnsPerPeer < 0 || c.SocketBuffer < 0 {
		return bad("FailureTimeout, ConnectTimeout, ConnsPerPeer and SocketBuffer must not be negative")
	}
	if c.FailureTimeout == 0 {
		c.FailureTimeout = DefaultFailureTimeout
	}
	if c.FailureTimeout < 10*time.Millisecond {
		return bad("FailureTimeout %v is too short (at least 10ms)", c.FailureTimeout)
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.ConnsPerPeer == 0 {
		c.ConnsPerPeer = 1
	}
	if c.ConnsPerPeer > maxConnsPerPeer {
		return bad("ConnsPerPeer %d is above %d", c.ConnsPerPeer, maxConnsPerPeer)
	}
	if c.SocketBuffer == 0 {
		c.SocketBuffer = DefaultSocketBuffer
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Addrs = slices.Clone(c.Addrs)
	c.JobKey = slices.Clone(c.JobKey)
	return c, nil
}

// linger bounds how long Close waits for peers to finish the close protocol.
func (c Config) linger() time.Duration { return min(c.FailureTimeout, 5*time.Second) }

// LocalConfigs binds n sockets on 127.0.0.1 with ports chosen by the kernel
// and returns one Config per rank: base with Rank, Addrs and the bound
// socket filled in (PacketConn for network "udp", the QUIC transport;
// Listener for "tcp"; both, on the same port, for "udp+tcp", the default
// network's two lanes: NewLanes). It is for tests and for launchers that start several
// ranks on one host; a launcher that starts child processes passes each
// socket's file (net.UDPConn.File, net.TCPListener.File) to its child. On
// error, every socket bound so far is closed.
func LocalConfigs(network string, n int, base Config) ([]Config, error) {
	if n < 1 {
		return nil, fmt.Errorf("nexar: LocalConfigs: n = %d, need at least 1", n)
	}
	cfgs := make([]Config, n)
	addrs := make([]string, n)
	var closers []io.Closer
	fail := func(err error) ([]Config, error) {
		for _, c := range closers {
			c.Close()
		}
		return nil, err
	}
	for i := range cfgs {
		cfgs[i] = base
		cfgs[i].Rank = i
		switch network {
		case "udp":
			pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				return fail(fmt.Errorf("nexar: LocalConfigs: %w", err))
			}
			closers = append(closers, pc)
			cfgs[i].PacketConn = pc
			addrs[i] = pc.LocalAddr().String()
		case "tcp":
			ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				return fail(fmt.Errorf("nexar: LocalConfigs: %w", err))
			}
			closers = append(closers, ln)
			cfgs[i].Listener = ln
			addrs[i] = ln.Addr().String()
		case "udp+tcp":
			ln, pc, err := ListenBoth(net.IPv4(127, 0, 0, 1), 0)
			if err != nil {
				return fail(fmt.Errorf("nexar: LocalConfigs: %w", err))
			}
			closers = append(closers, ln, pc)
			cfgs[i].Listener, cfgs[i].PacketConn = ln, pc
			addrs[i] = ln.Addr().String()
		default:
			return fail(fmt.Errorf("nexar: LocalConfigs: network %q, want \"udp\", \"tcp\" or \"udp+tcp\"", network))
		}
	}
	for i := range cfgs {
		cfgs[i].Addrs = addrs
	}
	return cfgs, nil
}

// ListenBoth binds a TCP listener and a UDP socket on ip and the same port,
// the sockets of the default network's two lanes (NewLanes). If port is 0
// the kernel picks it, and ListenBoth retries (up to 64 times) until a
// port is free for both.
func ListenBoth(ip net.IP, port int) (*net.TCPListener, *net.UDPConn, error) {
	attempts := 1
	if port == 0 {
		attempts = 64
	}
	var err error
	for range attempts {
		var ln *net.TCPListener
		if ln, err = net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port}); err != nil {
			break
		}
		var pc *net.UDPConn
		if pc, err = net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: ln.Addr().(*net.TCPAddr).Port}); err == nil {
			return ln, pc, nil
		}
		ln.Close()
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, nil, fmt.Errorf("bind TCP and UDP on %s: %w", net.JoinHostPort(ip.String(), strconv.Itoa(port)), err)
}

// Socket buffers.

var bufferWarned = map[string]*sync.Once{"udp": new(sync.Once), "tcp": new(sync.Once)}

// Linux socket options missing from package syscall on some platforms.
const (
	soSndBufForce  = 32 // SO_SNDBUFFORCE (Linux)
	soRcvBufForce  = 33 // SO_RCVBUFFORCE (Linux)
	tcpUserTimeout = 18 // TCP_USER_TIMEOUT (Linux)
)

// setSocketBuffers asks for want bytes of receive and send buffer on the
// socket, forcing past the system limit where the process may (Linux,
// CAP_NET_ADMIN), and returns the sizes in effect. Linux reports twice the
// usable size; the returned values are the usable ones.
func setSocketBuffers(rc syscall.RawConn, want int) (rcv, snd int, err error) {
	ctlErr := rc.Control(func(fd uintptr) {
		get := func(opt int) int {
			v, gerr := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, opt)
			if gerr != nil {
				err = gerr
				return 0
			}
			if runtime.GOOS == "linux" {
				v /= 2
			}
			return v
		}
		set := func(opt, force int) int {
			if get(opt) >= want {
				return get(opt)
			}
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, opt, want)
			if v := get(opt); v >= want || runtime.GOOS != "linux" {
				return v
			}
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, force, want)
			return get(opt)
		}
		rcv = set(syscall.SO_RCVBUF, soRcvBufForce)
		snd = set(syscall.SO_SNDBUF, soSndBufForce)
	})
	if ctlErr != nil {
		return 0, 0, ctlErr
	}
	return rcv, snd, err
}

// checkSocketBuffers sets the buffers of c and warns once per process and
// protocol when the kernel caps them below want.
func checkSocketBuffers(log *slog.Logger, proto string, c syscall.Conn, want int) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	rcv, snd, err := setSocketBuffers(rc, want)
	if err != nil || (rcv >= want && snd >= want) {
		return
	}
	bufferWarned[proto].Do(func() {
		fix := fmt.Sprintf("sysctl -w net.core.rmem_max=%d net.core.wmem_max=%d", want, want)
		log.Warn("nexar: the kernel caps socket buffers below what bulk transfers need; throughput will suffer. Raise the limits on every node (as root) with: "+fix,
			"proto", proto, "wanted_bytes", want, "receive_bytes", rcv, "send_bytes", snd, "fix", fix)
	})
}
