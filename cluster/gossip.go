package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// gossipTransport is a memberlist.Transport over sockets the caller bound
// (Sockets): packets over the UDP socket, streams accepted on the TCP
// listener. Its dials bind the local IP of the sockets, so gossip leaves on
// the interface that was chosen for it, not on whatever the routing table
// prefers.
//
// It also remembers, per address, how its last dial went (dialResult), so
// that Join can tell a seed that is not up yet from one that cannot be
// routed to: memberlist's own errors flatten the cause to text.
type gossipTransport struct {
	tcp    *net.TCPListener
	udp    *net.UDPConn
	ip     net.IP // the sockets' IP: advertised and bound by dials
	port   int
	log    *slog.Logger
	dialer net.Dialer

	packetCh chan *memberlist.Packet
	streamCh chan net.Conn

	// ctx is canceled by Shutdown: it ends the listeners' hand-offs and
	// the dials in flight.
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	wg     sync.WaitGroup

	mu    sync.Mutex
	dials map[string]dialResult // guarded by mu: last dial to each address
}

// dialResult is the outcome of the last dial to one address.
type dialResult struct {
	err error // nil: connected
}

// udpRecvBuffer is the receive buffer asked for the gossip UDP socket (as
// memberlist's own transport does): bursts of gossip after a join must not
// be dropped.
const udpRecvBuffer = 2 << 20

var _ memberlist.NodeAwareTransport = (*gossipTransport)(nil)

// newGossipTransport takes over s, which must be bound to one specific IP
// and one port. The listeners start at once.
func newGossipTransport(s Sockets, log *slog.Logger) (*gossipTransport, error) {
	if s.TCP == nil || s.UDP == nil {
		return nil, errors.New("both Gossip.TCP and Gossip.UDP are required (BindGossip binds them)")
	}
	ta := s.TCP.Addr().(*net.TCPAddr)
	ua := s.UDP.LocalAddr().(*net.UDPAddr)
	if ta.Port != ua.Port || !ta.IP.Equal(ua.IP) {
		return nil, fmt.Errorf("Gossip.TCP is bound to %s and Gossip.UDP to %s: they must share one IP and port", ta, ua)
	}
	if ta.IP.IsUnspecified() {
		return nil, fmt.Errorf("the gossip sockets are bound to %s, the unspecified address: bind the IP the other processes reach this one at", ta)
	}
	ip := ta.IP
	if ip4 := ip.To4(); ip4 != nil {
		ip = ip4
	}
	for size := udpRecvBuffer; size > 0; size /= 2 {
		if s.UDP.SetReadBuffer(size) == nil {
			break
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &gossipTransport{
		tcp:      s.TCP,
		udp:      s.UDP,
		ip:       ip,
		port:     ta.Port,
		log:      log,
		dialer:   net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}},
		packetCh: make(chan *memberlist.Packet),
		streamCh: make(chan net.Conn),
		ctx:      ctx,
		cancel:   cancel,
		dials:    make(map[string]dialResult),
	}
	t.wg.Add(2)
	go t.acceptStreams()
	go t.readPackets()
	return t, nil
}

// addr is the address the transport advertises, ip:port.
func (t *gossipTransport) addr() string {
	return net.JoinHostPort(t.ip.String(), fmt.Sprint(t.port))
}

// FinalAdvertiseAddr advertises the sockets' own IP and port unless
// memberlist was configured with others.
func (t *gossipTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip == "" {
		return t.ip, t.port, nil
	}
	a := net.ParseIP(ip)
	if a == nil {
		return nil, 0, fmt.Errorf("advertise address %q is not an IP", ip)
	}
	if a4 := a.To4(); a4 != nil {
		a = a4
	}
	return a, port, nil
}

// WriteTo sends one packet. After Shutdown it drops the packet without an
// error: memberlist's timers may still fire while it shuts down, and a
// closed socket is no news worth a warning.
func (t *gossipTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.closing() {
		return time.Now(), nil
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		ua, rerr := net.ResolveUDPAddr("udp", addr)
		if rerr != nil {
			return time.Time{}, rerr
		}
		ap = ua.AddrPort()
	}
	_, err = t.udp.WriteToUDPAddrPort(b, ap)
	return time.Now(), err
}

func (t *gossipTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

func (t *gossipTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// DialTimeout connects to addr from the sockets' IP. A dial in flight ends
// when the transport shuts down.
func (t *gossipTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(t.ctx, timeout)
	defer cancel()
	conn, err := t.dialer.DialContext(ctx, "tcp", addr)
	t.mu.Lock()
	t.dials[addr] = dialResult{err: err}
	t.mu.Unlock()
	return conn, err
}

func (t *gossipTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

// lastDial reports how the last dial to addr went; ok is false if there
// was none.
func (t *gossipTransport) lastDial(addr string) (r dialResult, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok = t.dials[addr]
	return r, ok
}

func (t *gossipTransport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown closes the sockets and waits for the listener goroutines. It is
// idempotent.
func (t *gossipTransport) Shutdown() error {
	var err error
	t.once.Do(func() {
		t.cancel()
		err = errors.Join(t.tcp.Close(), t.udp.Close())
		t.wg.Wait()
	})
	return err
}

func (t *gossipTransport) closing() bool { return t.ctx.Err() != nil }

// acceptStreams hands accepted connections to memberlist until Shutdown.
func (t *gossipTransport) acceptStreams() {
	defer t.wg.Done()
	var delay time.Duration
	for {
		conn, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.closing() {
				return
			}
			// Out of file descriptors and the like: back off, as
			// memberlist's own transport does, rather than spin.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.log.Warn("cluster: gossip: accepting a connection failed", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-t.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		select {
		case t.streamCh <- conn:
		case <-t.ctx.Done():
			conn.Close()
			return
		}
	}
}

// readPackets hands received datagrams to memberlist until Shutdown.
func (t *gossipTransport) readPackets() {
	defer t.wg.Done()
	for {
		// memberlist keeps the buffer: a fresh one per packet.
		buf := make([]byte, 65536)
		n, from, err := t.udp.ReadFromUDP(buf)
		now := time.Now()
		if err != nil {
			if t.closing() {
				return
			}
			t.log.Debug("cluster: gossip: reading a packet failed", "err", err)
			continue
		}
		if n == 0 {
			continue
		}
		select {
		case t.packetCh <- &memberlist.Packet{Buf: buf[:n], From: from, Timestamp: now}:
		case <-t.ctx.Done():
			return
		}
	}
}
