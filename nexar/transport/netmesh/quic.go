package netmesh

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hiercomm/hiercomm/nexar/transport"
	"github.com/quic-go/quic-go"
)

// The QUIC transport: the default between nodes.
//
// Each pair of ranks shares ConnsPerPeer QUIC connections, all on one UDP
// socket per rank (quic-go demultiplexes by connection id). On each
// connection each side opens one unidirectional stream and writes frames on
// it back to back; a read loop per incoming stream delivers them. TLS 1.3
// with certificates from the job CA (jobca.go) authenticates both ends and
// binds their ranks.
//
// Setting up a connection: after the TLS handshake the dialer opens its
// stream and writes a hello (its rank, ours, the connection's index and its
// ConnsPerPeer); the acceptor checks it against the certificate and its own
// configuration, then opens its stream and answers with its hello. Only
// then is the connection a link of the mesh.
//
// A killed peer sends nothing (UDP has no FIN): it is detected by the idle
// timeout, MaxIdleTimeout = FailureTimeout, with keepalives every
// FailureTimeout/3 keeping healthy idle connections open.

// Flow control windows: large enough that one connection keeps a fast link
// busy with MaxFrame frames in flight. quic-go grows a window from its
// initial to its maximum size as the reader keeps up; memory is used only
// by data that arrived and was not read yet, and the read loops never stop
// reading.
const (
	quicStreamWindow    = 16 << 20
	quicMaxStreamWindow = 64 << 20
	quicConnWindow      = 24 << 20
	quicMaxConnWindow   = 96 << 20
)

// Application error codes of CONNECTION_CLOSE.
const (
	quicCodeClosed  quic.ApplicationErrorCode = 0 // the close protocol ran, or we close
	quicCodeFailed  quic.ApplicationErrorCode = 1 // we gave up on the peer
	quicCodeRefused quic.ApplicationErrorCode = 2 // the connection was refused at setup
)

type quicTransport struct {
	m    *mesh
	ca   *jobCA
	leaf tls.Certificate
	pc   net.PacketConn
	tr   *quic.Transport
	ln   *quic.Listener
	conf *quic.Config

	wg        sync.WaitGroup // goroutines waiting for acks
	hellos    atomic.Int64   // TLS ClientHellos received
	accepted  atomic.Int64   // connections whose handshake completed
	closeOnce sync.Once
}

// NewQUIC joins the mesh of len(cfg.Addrs) ranks over QUIC and returns once
// it has a connection to every peer (rank i dials every j < i and accepts
// every j > i), or fails after cfg.ConnectTimeout or when ctx ends. h
// receives frames from the moment the first connection is up, possibly
// before NewQUIC returns; it is told of failures only after. The transport
// takes over cfg.PacketConn, even when it returns an error.
func NewQUIC(ctx context.Context, cfg Config, h transport.Handler) (transport.Transport, error) {
	vcfg, err := cfg.validate()
	if err != nil {
		if cfg.PacketConn != nil {
			cfg.PacketConn.Close()
		}
		return nil, err
	}
	cfg = vcfg
	t := &quicTransport{pc: cfg.PacketConn}
	t.m = newMesh(cfg, h, t.describe)
	t.m.gaveUp = func(err error) bool {
		var app *quic.ApplicationError
		return errors.As(err, &app) && app.Remote && app.ErrorCode == quicCodeFailed
	}
	fail := func(err error) (transport.Transport, error) {
		t.teardown()
		return nil, err
	}
	if t.ca, err = newJobCA(cfg.JobKey, cfg.JobID); err != nil {
		return fail(err)
	}
	if t.leaf, err = t.ca.issueLeaf(cfg.Rank); err != nil {
		return fail(err)
	}
	if t.pc == nil {
		if t.pc, err = net.ListenPacket("udp", cfg.Addrs[cfg.Rank]); err != nil {
			return fail(fmt.Errorf("nexar: rank %d: listen on %s: %w", cfg.Rank, cfg.Addrs[cfg.Rank], err))
		}
	}
	if sc, ok := t.pc.(syscall.Conn); ok {
		checkSocketBuffers(cfg.Logger, "udp", sc, cfg.SocketBuffer)
	}
	t.conf = &quic.Config{
		HandshakeIdleTimeout:           min(max(cfg.FailureTimeout, time.Second), 3*time.Second),
		MaxIdleTimeout:                 cfg.FailureTimeout,
		KeepAlivePeriod:                cfg.FailureTimeout / 3,
		InitialStreamReceiveWindow:     quicStreamWindow,
		MaxStreamReceiveWindow:         quicMaxStreamWindow,
		InitialConnectionReceiveWindow: quicConnWindow,
		MaxConnectionReceiveWindow:     quicMaxConnWindow,
		MaxIncomingStreams:             -1, // only unidirectional streams
		MaxIncomingUniStreams:          4,  // the data stream and the ack
	}
	t.tr = &quic.Transport{Conn: t.pc}
	onVerify := func(err error) {
		if err != nil {
			t.m.note("a dialer's certificate: %v", err)
		}
	}
	// In TLS 1.3 the dialer checks our certificate first; one that refuses
	// it (a different job key or job id) leaves only a handshake that began
	// and never completed, which is counted here for the formation error.
	serverConf := t.ca.serverTLS(t.leaf, t.m.wantDialer, onVerify)
	serverConf.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		t.hellos.Add(1)
		return nil, nil
	}
	t.m.explain = func() string {
		if n := t.hellos.Load() - t.accepted.Load(); n > 0 {
			return fmt.Sprintf("%d TLS handshake(s) from dialers began and did not complete, as when the dialer refuses our certificate because it runs with a different job key or job id", n)
		}
		return ""
	}
	if t.ln, err = t.tr.Listen(serverConf, t.conf); err != nil {
		return fail(fmt.Errorf("nexar: rank %d: listen: %w", cfg.Rank, err))
	}
	err = t.m.form(ctx, t.dial, t.accept)
	t.ln.Close() // the mesh is complete: no one else may join
	if err != nil {
		return fail(err)
	}
	return t, nil
}

func (t *quicTransport) Rank() int                { return t.m.cfg.Rank }
func (t *quicTransport) Size() int                { return len(t.m.peers) }
func (t *quicTransport) PeerAddr(peer int) string { return peerAddr(t.m, peer) }

// Send writes one frame to peer; h.Len is set from payload. It returns once
// payload has been handed to QUIC and may be reused. ctx bounds the wait for
// the connection's stream; a frame that has begun is always finished.
func (t *quicTransport) Send(ctx context.Context, peer int, h transport.Header, payload []byte) error {
	return t.m.send(ctx, peer, h, payload)
}

// SendNow is Send without waiting for a stream that is busy (transport.NowSender).
func (t *quicTransport) SendNow(peer int, h transport.Header, payload []byte) (bool, error) {
	return t.m.sendNow(peer, h, payload)
}

// Close runs the close protocol (see mesh): frames already sent reach peers
// that are alive, and frames peers send until they close are delivered.
// It waits at most min(FailureTimeout, 5s) for peers that do not close.
// After Close returns the handler is called no more.
func (t *quicTransport) Close() error {
	t.closeOnce.Do(func() {
		t.m.shutdown()
		t.teardown()
	})
	return nil
}

// teardown closes the sockets and waits for every goroutine.
func (t *quicTransport) teardown() {
	t.m.closing.Store(true)
	for _, p := range t.m.peers {
		if p != nil {
			for _, l := range t.m.linksOf(p) {
				l.abort("closed")
			}
		}
	}
	if t.ln != nil {
		t.ln.Close()
	}
	if t.tr != nil {
		t.tr.Close()
	}
	if t.pc != nil {
		t.pc.Close()
	}
	t.m.quiesce()
	t.wg.Wait()
}

// hello is what each side of a new connection writes first on its stream.
type hello struct {
	from, to, idx, conns int
}

const helloSize = 16

var helloMagic = [4]byte{'h', 'c', 'q', '1'}

func (h hello) encode() []byte {
	b := make([]byte, helloSize)
	copy(b, helloMagic[:])
	binary.LittleEndian.PutUint32(b[4:], uint32(h.from))
	binary.LittleEndian.PutUint32(b[8:], uint32(h.to))
	binary.LittleEndian.PutUint16(b[12:], uint16(h.idx))
	binary.LittleEndian.PutUint16(b[14:], uint16(h.conns))
	return b
}

// readHello reads a hello from r and checks that it is the one expected
// (idx < 0: any index).
func readHello(r io.Reader, want hello) (hello, error) {
	b := make([]byte, helloSize)
	if _, err := io.ReadFull(r, b); err != nil {
		return hello{}, fmt.Errorf("reading its hello: %w", err)
	}
	if [4]byte(b[:4]) != helloMagic {
		return hello{}, permanent{fmt.Errorf("its hello is not hiercomm's (%q): a different program or version", b[:4])}
	}
	got := hello{
		from:  int(binary.LittleEndian.Uint32(b[4:])),
		to:    int(binary.LittleEndian.Uint32(b[8:])),
		idx:   int(binary.LittleEndian.Uint16(b[12:])),
		conns: int(binary.LittleEndian.Uint16(b[14:])),
	}
	switch {
	case got.from != want.from || got.to != want.to:
		return got, permanent{fmt.Errorf("its hello says rank %d to rank %d, expected rank %d to rank %d", got.from, got.to, want.from, want.to)}
	case got.conns != want.conns:
		return got, permanent{fmt.Errorf("it uses ConnsPerPeer %d, this rank %d: every rank must use the same", got.conns, want.conns)}
	case got.idx >= want.conns || (want.idx >= 0 && got.idx != want.idx):
		return got, permanent{fmt.Errorf("its hello names connection %d of %d, expected %d", got.idx, got.conns, want.idx)}
	}
	return got, nil
}

// readWithin makes reads on s end when ctx does.
func readWithin(ctx context.Context, s *quic.ReceiveStream) (stop func() bool) {
	if d, ok := ctx.Deadline(); ok {
		s.SetReadDeadline(d)
	}
	return context.AfterFunc(ctx, func() { s.SetReadDeadline(time.Now()) })
}

// dial makes connection idx to the lower rank p.
func (t *quicTransport) dial(ctx context.Context, p *peer, idx int) (*link, error) {
	raddr, err := net.ResolveUDPAddr("udp", p.addr)
	if err != nil {
		return nil, err
	}
	var (
		vmu  sync.Mutex
		verr error
	)
	tlsConf := t.ca.clientTLS(t.leaf, p.rank, func(err error) {
		vmu.Lock()
		verr = err
		vmu.Unlock()
	})
	conn, err := t.tr.Dial(ctx, raddr, tlsConf, t.conf)
	if err != nil {
		vmu.Lock()
		defer vmu.Unlock()
		if verr != nil {
			return nil, verr
		}
		return nil, quicSetupError(err)
	}
	me := t.m.cfg.Rank
	conns := t.m.cfg.ConnsPerPeer
	l, err := func() (*link, error) {
		s, err := conn.OpenUniStreamSync(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := s.Write(hello{from: me, to: p.rank, idx: idx, conns: conns}.encode()); err != nil {
			return nil, err
		}
		rs, err := conn.AcceptUniStream(ctx)
		if err != nil {
			return nil, err
		}
		stop := readWithin(ctx, rs)
		_, err = readHello(rs, hello{from: p.rank, to: me, idx: idx, conns: conns})
		stop()
		rs.SetReadDeadline(time.Time{})
		if err != nil {
			return nil, err
		}
		return t.newLink(conn, p, s, rs), nil
	}()
	if err != nil {
		conn.CloseWithError(quicCodeRefused, err.Error())
		return nil, quicSetupError(err)
	}
	return l, nil
}

// quicSetupError marks the errors of a connection attempt that retrying
// cannot fix.
func quicSetupError(err error) error {
	var te *quic.TransportError
	if errors.As(err, &te) && te.Remote && te.ErrorCode.IsCryptoError() {
		return fmt.Errorf("%w: it refused our certificate (%v): does it run with the same job key, job id and address list?", ErrAuth, err)
	}
	var ae *quic.ApplicationError
	if errors.As(err, &ae) && ae.Remote && ae.ErrorCode == quicCodeRefused {
		return permanent{fmt.Errorf("it refused the connection: %s", ae.ErrorMessage)}
	}
	return err
}

// accept sets up the connections that higher ranks dial, until ctx ends.
func (t *quicTransport) accept(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := t.ln.Accept(ctx)
		if err != nil {
			return
		}
		t.accepted.Add(1)
		wg.Go(func() {
			if err := t.acceptConn(ctx, conn); err != nil {
				t.m.note("a connection from %v: %v", conn.RemoteAddr(), err)
				conn.CloseWithError(quicCodeRefused, err.Error())
			}
		})
	}
}

func (t *quicTransport) acceptConn(ctx context.Context, conn *quic.Conn) error {
	rank, err := peerRank(conn.ConnectionState().TLS)
	if err != nil {
		return err
	}
	if err := t.m.wantDialer(rank); err != nil {
		return err
	}
	p := t.m.peers[rank]
	me := t.m.cfg.Rank
	conns := t.m.cfg.ConnsPerPeer
	rs, err := conn.AcceptUniStream(ctx)
	if err != nil {
		return err
	}
	stop := readWithin(ctx, rs)
	hi, err := readHello(rs, hello{from: rank, to: me, idx: -1, conns: conns})
	stop()
	rs.SetReadDeadline(time.Time{})
	if err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	s, err := conn.OpenUniStreamSync(ctx)
	if err != nil {
		return err
	}
	return t.m.registerAnswering(t.newLink(conn, p, s, rs), hi.idx, func() error {
		_, err := s.Write(hello{from: me, to: rank, idx: hi.idx, conns: conns}.encode())
		return err
	})
}

// newLink makes a link of the connection's two streams. The only stream
// the peer opens after its data stream is its ack: it has read everything
// we sent (see mesh).
func (t *quicTransport) newLink(conn *quic.Conn, p *peer, s *quic.SendStream, rs *quic.ReceiveStream) *link {
	l := newLink(p, s, s.Close, bufio.NewReaderSize(rs, 64<<10))
	acked := make(chan struct{})
	l.acked = acked
	l.gone = conn.Context().Done()
	l.onEnd = func() {
		if ack, err := conn.OpenUniStream(); err == nil {
			ack.Close()
		}
	}
	l.abort = func(reason string) {
		code := quicCodeFailed
		if t.m.closing.Load() {
			code = quicCodeClosed
		}
		conn.CloseWithError(code, reason)
	}
	t.wg.Go(func() {
		if _, err := conn.AcceptUniStream(context.Background()); err == nil {
			close(acked)
		}
	})
	return l
}

// describe says what a QUIC error means for the peer.
func (t *quicTransport) describe(err error) error {
	var (
		idle  *quic.IdleTimeoutError
		app   *quic.ApplicationError
		reset *quic.StatelessResetError
		he    *HeaderError
	)
	switch {
	case errors.As(err, &idle):
		return fmt.Errorf("no packet from it for %v (FailureTimeout): its process is probably dead or the network is cut (%w)", t.m.cfg.FailureTimeout, err)
	case errors.As(err, &app) && app.Remote:
		return fmt.Errorf("it closed the connection: %q (%w)", app.ErrorMessage, err)
	case errors.As(err, &reset):
		return fmt.Errorf("it lost the connection's state, its process probably restarted (%w)", err)
	case errors.As(err, &he):
		return fmt.Errorf("it sent a corrupt frame (%w)", err)
	}
	return err
}

func peerAddr(m *mesh, peer int) string {
	if peer < 0 || peer >= len(m.cfg.Addrs) {
		return ""
	}
	return m.cfg.Addrs[peer]
}

// DropPeer implements transport.PeerDropper.
func (t *quicTransport) DropPeer(peer int, cause error) { t.m.dropPeer(peer, cause) }

// Stalled implements transport.Staller.
func (t *quicTransport) Stalled(now time.Time) (gap, timeout time.Duration, ok bool) {
	return t.m.stalled(now)
}
