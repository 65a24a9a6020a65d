package netmesh

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/hiercomm/hiercomm/nexar/transport"
)

// The TCP transport: for trusted fabrics, where encryption costs more than
// it protects (as NCCL's socket transport). Frames are not encrypted, but
// every connection is authenticated when it is made, with a mutual
// challenge-response keyed by the job key, so a process without the key
// cannot join the mesh or pose as a rank.
//
// Setting up a connection (D dials, A accepts; integers little-endian):
//
//	D → A  "hct1" | D's rank u32 | A's rank u32 | index u16 | ConnsPerPeer u16 | nonce_D [32]
//	A → D  "hct1" | A's rank u32 | D's rank u32 | index u16 | ConnsPerPeer u16 | nonce_A [32] | mac_A [32]
//	D → A  mac_D [32]
//	A → D  status byte (0: accepted)
//
// mac_X = HMAC-SHA256(k, label_X | D's hello | A's hello without mac_A),
// where k is derived from the job key and job id by HKDF under a label of
// its own (tcpAuthKey) and label_X names the side, so neither proof can be
// replayed as the other. D checks A's proof before it proves anything
// itself; A checks D's before the connection joins the mesh. Each side
// checks that the other's hello names the ranks and ConnsPerPeer it
// expects. A wrong key fails on both sides: D with ErrAuth at once, A by
// refusing the connection and saying why when its ConnectTimeout passes.
//
// Each connection carries frames both ways; the close protocol (mesh) ends
// the outgoing direction with CloseWrite. A killed peer's kernel closes or
// resets its connections, which is seen at once; a silent one (host down,
// network cut) is caught by TCP keepalive and TCP_USER_TIMEOUT within about
// FailureTimeout, and a stopped or hung one, whose kernel still answers,
// by the heartbeats (heartbeat.go). A rank that gives a peer up writes the
// expel record before it ends the link, so that the peer, if it runs,
// learns it was expelled (ErrExpelled) rather than blame this rank.

const (
	tcpHelloSize = 48
	tcpMacSize   = sha256.Size
)

var tcpMagic = [4]byte{'h', 'c', 't', '1'}

type tcpTransport struct {
	m       *mesh
	authKey []byte   // plain TCP: the key of the challenge-response
	sec     *tlsLane // the TLS lane (tlslane.go): connections in TLS 1.3 with the job CA's certificates; nil for plain TCP
	ln      net.Listener

	closeOnce sync.Once
}

// NewTCP joins the mesh of len(cfg.Addrs) ranks over TCP; see NewQUIC for
// what it waits for. The transport takes over cfg.Listener, even when it
// returns an error, and closes it once the mesh is formed.
func NewTCP(ctx context.Context, cfg Config, h transport.Handler) (transport.Transport, error) {
	t, err := newTCP(ctx, cfg, h, false)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// newTCP is NewTCP, or with secure the TLS lane (newTLSLane).
func newTCP(ctx context.Context, cfg Config, h transport.Handler, secure bool) (*tcpTransport, error) {
	vcfg, err := cfg.validate()
	if err != nil {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return nil, err
	}
	cfg = vcfg
	t := &tcpTransport{ln: cfg.Listener}
	t.m = newMesh(cfg, h, t.describe)
	t.m.beating = true
	t.m.gaveUp = func(err error) bool { return errors.Is(err, errGaveUp) }
	fail := func(err error) (*tcpTransport, error) {
		t.teardown()
		return nil, err
	}
	if secure {
		if t.sec, err = newTLSLaneKeys(t.m); err != nil {
			return fail(err)
		}
	} else if t.authKey, err = tcpAuthKey(cfg.JobKey, cfg.JobID); err != nil {
		return fail(err)
	}
	if t.ln == nil {
		lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
			setSocketBuffers(rc, cfg.SocketBuffer)
			return nil
		}}
		if t.ln, err = lc.Listen(ctx, "tcp", cfg.Addrs[cfg.Rank]); err != nil {
			return fail(fmt.Errorf("nexar: rank %d: listen on %s: %w", cfg.Rank, cfg.Addrs[cfg.Rank], err))
		}
	}
	if sc, ok := t.ln.(syscall.Conn); ok {
		checkSocketBuffers(cfg.Logger, "tcp", sc, cfg.SocketBuffer)
	}
	err = t.m.form(ctx, t.dial, t.accept)
	t.ln.Close() // the mesh is complete: no one else may join
	if err != nil {
		return fail(err)
	}
	return t, nil
}

func (t *tcpTransport) Rank() int                { return t.m.cfg.Rank }
func (t *tcpTransport) Size() int                { return len(t.m.peers) }
func (t *tcpTransport) PeerAddr(peer int) string { return peerAddr(t.m, peer) }

// Send writes one frame to peer; h.Len is set from payload. It returns once
// payload has been written to the socket and may be reused. ctx bounds the
// wait for the connection; a frame that has begun is always finished.
func (t *tcpTransport) Send(ctx context.Context, peer int, h transport.Header, payload []byte) error {
	return t.m.send(ctx, peer, h, payload)
}

// SendNow is Send without waiting for a connection that is busy (transport.NowSender).
func (t *tcpTransport) SendNow(peer int, h transport.Header, payload []byte) (bool, error) {
	return t.m.sendNow(peer, h, payload)
}

// Close runs the close protocol (see mesh), waiting at most
// min(FailureTimeout, 5s) for peers that do not close. After Close returns
// the handler is called no more.
func (t *tcpTransport) Close() error {
	t.closeOnce.Do(func() {
		t.m.shutdown()
		t.teardown()
	})
	return nil
}

func (t *tcpTransport) teardown() {
	t.m.closing.Store(true)
	if t.ln != nil {
		t.ln.Close()
	}
	for _, p := range t.m.peers {
		if p != nil {
			for _, l := range t.m.linksOf(p) {
				l.abort("closed")
			}
		}
	}
	t.m.quiesce()
}

// tune sets the options of a connection of the mesh: no Nagle, big
// buffers, keepalive and a user timeout so that a silent peer is noticed
// within about FailureTimeout.
func (t *tcpTransport) tune(c *net.TCPConn) {
	cfg := t.m.cfg
	c.SetNoDelay(true)
	ft := cfg.FailureTimeout
	c.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: max(ft/2, time.Second), Interval: max(ft/6, time.Second), Count: 3})
	checkSocketBuffers(cfg.Logger, "tcp", c, cfg.SocketBuffer)
	if runtime.GOOS == "linux" {
		if rc, err := c.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) {
				syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(ft.Milliseconds()))
			})
		}
	}
}

// within makes the connection's reads and writes end when ctx does, until
// the returned function is called.
func within(ctx context.Context, c net.Conn) (done func()) {
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	return func() {
		if !stop() {
			// The deadline fired or is firing: the handshake fails anyway.
			return
		}
		c.SetDeadline(time.Time{})
	}
}

func (t *tcpTransport) encodeHello(from, to, idx int, nonce []byte) []byte {
	b := make([]byte, tcpHelloSize)
	copy(b, tcpMagic[:])
	binary.LittleEndian.PutUint32(b[4:], uint32(from))
	binary.LittleEndian.PutUint32(b[8:], uint32(to))
	binary.LittleEndian.PutUint16(b[12:], uint16(idx))
	binary.LittleEndian.PutUint16(b[14:], uint16(t.m.cfg.ConnsPerPeer))
	copy(b[16:], nonce)
	return b
}

func decodeTCPHello(b []byte) (h hello, nonce []byte, err error) {
	if [4]byte(b[:4]) != tcpMagic {
		if b[0] == 0x16 && b[1] == 0x03 { // a TLS handshake record
			return hello{}, nil, permanent{fmt.Errorf("it speaks TLS: it runs with network quic (whose TLS lane is on TCP), this rank with tcp; every rank must use the same network")}
		}
		return hello{}, nil, permanent{fmt.Errorf("its hello is not hiercomm's (%q): a different program or version", b[:4])}
	}
	return hello{
		from:  int(binary.LittleEndian.Uint32(b[4:])),
		to:    int(binary.LittleEndian.Uint32(b[8:])),
		idx:   int(binary.LittleEndian.Uint16(b[12:])),
		conns: int(binary.LittleEndian.Uint16(b[14:])),
	}, b[16:48], nil
}

// proof is mac_X of the handshake transcript.
func (t *tcpTransport) proof(label string, helloD, helloA []byte) []byte {
	mac := hmac.New(sha256.New, t.authKey)
	mac.Write([]byte(label))
	mac.Write(helloD)
	mac.Write(helloA)
	return mac.Sum(nil)
}

const (
	tcpLabelAcceptor = "hiercomm/1 tcp acceptor proof"
	tcpLabelDialer   = "hiercomm/1 tcp dialer proof"
)

func nonce() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
}

// dial makes connection idx to the lower rank p.
func (t *tcpTransport) dial(ctx context.Context, p *peer, idx int) (*link, error) {
	cfg := t.m.cfg
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		setSocketBuffers(rc, cfg.SocketBuffer)
		return nil
	}}
	nc, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	c := nc.(*net.TCPConn)
	if t.sec != nil {
		return t.sec.dial(ctx, t, c, p, idx)
	}
	done := within(ctx, c)
	err = t.dialerHandshake(c, p, idx)
	done()
	if err != nil {
		c.Close()
		return nil, err
	}
	t.tune(c)
	return t.newLink(c, c, p), nil
}

func (t *tcpTransport) dialerHandshake(c *net.TCPConn, p *peer, idx int) error {
	me := t.m.cfg.Rank
	helloD := t.encodeHello(me, p.rank, idx, nonce())
	if _, err := c.Write(helloD); err != nil {
		return err
	}
	resp := make([]byte, tcpHelloSize+tcpMacSize)
	if _, err := io.ReadFull(c, resp); err != nil {
		return fmt.Errorf("reading its hello: %w", err)
	}
	helloA := resp[:tcpHelloSize]
	got, _, err := decodeTCPHello(helloA)
	if err != nil {
		return err
	}
	if !hmac.Equal(resp[tcpHelloSize:], t.proof(tcpLabelAcceptor, helloD, helloA)) {
		return fmt.Errorf("%w: the process at rank %d's address failed to prove the job key: it runs with a different job key or job id", ErrAuth, p.rank)
	}
	switch {
	case got.from != p.rank || got.to != me:
		return fmt.Errorf("%w: the process at rank %d's address says it is rank %d (to rank %d): is the address list the same on every rank?", ErrAuth, p.rank, got.from, got.to)
	case got.conns != t.m.cfg.ConnsPerPeer:
		return permanent{fmt.Errorf("it uses ConnsPerPeer %d, this rank %d: every rank must use the same", got.conns, t.m.cfg.ConnsPerPeer)}
	case got.idx != idx:
		return permanent{fmt.Errorf("it answered for connection %d, expected %d", got.idx, idx)}
	}
	if _, err := c.Write(t.proof(tcpLabelDialer, helloD, helloA)); err != nil {
		return err
	}
	var status [1]byte
	if _, err := io.ReadFull(c, status[:]); err != nil {
		return fmt.Errorf("waiting for its verdict: %w", err)
	}
	if status[0] != 0 {
		return permanent{fmt.Errorf("it refused the connection (status %d): see its log or error", status[0])}
	}
	return nil
}

// accept sets up the connections that higher ranks dial, until ctx ends.
func (t *tcpTransport) accept(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { t.ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		nc, err := t.ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				t.m.note("accept: %v", err)
			}
			return
		}
		wg.Go(func() {
			c, ok := nc.(*net.TCPConn)
			if !ok {
				nc.Close()
				return
			}
			if t.sec != nil {
				if err := t.sec.accept(ctx, t, c); err != nil {
					t.m.note("a connection from %v: %v", c.RemoteAddr(), err)
					c.Close()
				}
				return
			}
			done := within(ctx, c)
			p, idx, err := t.acceptorHandshake(c)
			done()
			if err == nil {
				t.tune(c)
				err = t.m.register(t.newLink(c, c, p), idx)
			}
			if err != nil {
				t.m.note("a connection from %v: %v", c.RemoteAddr(), err)
				c.Close()
			}
		})
	}
}

func (t *tcpTransport) acceptorHandshake(c *net.TCPConn) (*peer, int, error) {
	me := t.m.cfg.Rank
	helloD := make([]byte, tcpHelloSize)
	if _, err := io.ReadFull(c, helloD); err != nil {
		return nil, 0, fmt.Errorf("reading its hello: %w", err)
	}
	got, _, err := decodeTCPHello(helloD)
	if err != nil {
		return nil, 0, err
	}
	// Answer honestly even if the hello is wrong, so that the dialer can
	// say what differs; it is refused below.
	helloA := t.encodeHello(me, got.from, got.idx, nonce())
	resp := append(helloA, t.proof(tcpLabelAcceptor, helloD, helloA)...)
	if _, err := c.Write(resp); err != nil {
		return nil, 0, err
	}
	macD := make([]byte, tcpMacSize)
	if _, err := io.ReadFull(c, macD); err != nil {
		return nil, 0, fmt.Errorf("a dialer claiming rank %d hung up during authentication (it rejected our proof: a different job key or job id?): %w", got.from, err)
	}
	refuse := func(err error) (*peer, int, error) {
		c.Write([]byte{1})
		return nil, 0, err
	}
	if !hmac.Equal(macD, t.proof(tcpLabelDialer, helloD, helloA)) {
		return refuse(fmt.Errorf("%w: a dialer claiming rank %d failed to prove the job key: it runs with a different job key or job id", ErrAuth, got.from))
	}
	switch {
	case got.to != me:
		return refuse(fmt.Errorf("rank %d dialed this address for rank %d: is the address list the same on every rank?", got.from, got.to))
	case t.m.wantDialer(got.from) != nil:
		return refuse(t.m.wantDialer(got.from))
	case got.conns != t.m.cfg.ConnsPerPeer:
		return refuse(fmt.Errorf("rank %d uses ConnsPerPeer %d, this rank %d", got.from, got.conns, t.m.cfg.ConnsPerPeer))
	case got.idx >= t.m.cfg.ConnsPerPeer:
		return refuse(fmt.Errorf("rank %d offered connection %d of %d", got.from, got.idx, got.conns))
	case t.m.has(t.m.peers[got.from], got.idx):
		return refuse(fmt.Errorf("rank %d already has connection %d: is another process running as rank %d?", got.from, got.idx, got.from))
	}
	if _, err := c.Write([]byte{0}); err != nil {
		return nil, 0, err
	}
	return t.m.peers[got.from], got.idx, nil
}

// newLink makes a link of a connection: c carries the frames (raw itself,
// or the TLS connection over it), raw is the socket. A plain connection's
// read side is a pump (pump.go) that waiting receives drive too; TLS
// buffers what it decrypted, and laneConn reads the socket through a
// buffer, so the TLS lane's read loop reads it alone.
func (t *tcpTransport) newLink(c net.Conn, raw *net.TCPConn, p *peer) *link {
	// TLS (laneConn): close_notify, then the socket's FIN.
	finish := c.(interface{ CloseWrite() error }).CloseWrite
	l := newLink(p, c, finish, nil)
	if c != net.Conn(raw) {
		l.r = c
	} else if pmp, err := newPump(raw, t.m.deliverer(l)); err == nil {
		l.pump = pmp // the read loop reads through the pump, not l.r
		t.m.lands(l)
	} else {
		l.r = bufio.NewReaderSize(c, 64<<10) // no raw socket: the read loop reads it alone
	}
	l.abort = func(string) {
		if t.m.closing.Load() || !t.expel(l, c, raw) {
			raw.Close()
		}
	}
	return l
}

// expel tells the peer of l that this rank gave it up, with the expel
// record (unless a writer holds the link, as one blocked on a stopped
// peer's full window does), and ends the link: the connection itself is
// closed a little later, because closing it at once, with the peer's
// data unread, would reset it and could drop the record. It reports
// whether it took the link over.
func (t *tcpTransport) expel(l *link, c net.Conn, raw *net.TCPConn) bool {
	select {
	case l.sem <- struct{}{}:
	default:
		return false
	}
	defer func() { <-l.sem }()
	if !l.finished {
		l.finished = true
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		c.Write(expelRecord)
		l.finish()
	}
	time.AfterFunc(time.Second, func() { raw.Close() })
	return true
}

// describe says what a TCP error means for the peer.
func (t *tcpTransport) describe(err error) error {
	var he *HeaderError
	switch {
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return fmt.Errorf("its connection was reset: its process was probably killed (%w)", err)
	case errors.Is(err, syscall.ETIMEDOUT):
		return fmt.Errorf("it did not answer for about %v (FailureTimeout): its host is down or the network is cut (%w)", t.m.cfg.FailureTimeout, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("its connection ended in the middle of a frame: its process was probably killed (%w)", err)
	case errors.As(err, &he):
		return fmt.Errorf("it sent a corrupt frame (%w)", err)
	}
	return err
}

// DropPeer implements transport.PeerDropper.
func (t *tcpTransport) DropPeer(peer int, cause error) { t.m.dropPeer(peer, cause) }

// Stalled implements transport.Staller.
func (t *tcpTransport) Stalled(now time.Time) (gap, timeout time.Duration, ok bool) {
	return t.m.stalled(now)
}
