package netmesh

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"

	"github.com/hiercomm/hiercomm/nexar/transport"
)

// The TLS lane: the TCP transport (tcp.go) with every connection in TLS 1.3,
// authenticated as QUIC's are, by certificates from the job CA (jobca.go).
// It is the bulk lane of the default network (lanes.go): the kernel's TCP
// moves large frames with far less CPU per byte than QUIC's 1452-byte
// packets, and AES-GCM over 16 KiB records keeps them private and intact.
//
// Setting up a connection (D dials, A accepts): a TLS 1.3 handshake with
// mutual authentication (D checks that A's leaf names the rank it dialed,
// A that D's names a rank that may dial it: clientTLS and serverTLS), then,
// inside TLS, D writes its hello (the QUIC transport's: its rank, A's rank,
// the connection's index, its ConnsPerPeer) and A, once it has checked it
// against D's certificate and its own configuration, answers with its own.
// Only then is the connection a link of the mesh. A refuses a hello it
// does not accept after answering with its own hello, so that D can say
// what differs (another ConnsPerPeer, another address list).
//
// Everything else is the TCP transport's: the frames, the heartbeats, the
// failure detection (a killed peer's kernel ends its connections, which is
// seen at once), the close protocol (the goodbye, then TLS's close_notify
// and the socket's FIN) and the expel record.

// tlsLane holds what the TLS lane adds to a TCP transport.
type tlsLane struct {
	ca   *jobCA
	leaf tls.Certificate
}

// newTLSLaneKeys derives the job CA and issues this rank's leaf.
func newTLSLaneKeys(m *mesh) (*tlsLane, error) {
	ca, err := newJobCA(m.cfg.JobKey, m.cfg.JobID)
	if err != nil {
		return nil, err
	}
	leaf, err := ca.issueLeaf(m.cfg.Rank)
	if err != nil {
		return nil, err
	}
	return &tlsLane{ca: ca, leaf: leaf}, nil
}

// bulk sets what a TLS configuration of the lane adds to the job CA's:
// full 16 KiB records from the first byte (the lane carries large frames).
func bulk(c *tls.Config) *tls.Config {
	c.DynamicRecordSizingDisabled = true
	return c
}

// newTLSLane joins the mesh over TCP with TLS 1.3; see NewQUIC for what it
// waits for and NewTCP for the Listener it takes over.
func newTLSLane(ctx context.Context, cfg Config, h transport.Handler) (*tcpTransport, error) {
	return newTCP(ctx, cfg, h, true)
}

// dial makes connection idx to the lower rank p over c, just connected.
func (s *tlsLane) dial(ctx context.Context, t *tcpTransport, c *net.TCPConn, p *peer, idx int) (*link, error) {
	var (
		vmu  sync.Mutex
		verr error
	)
	cc := &corkConn{TCPConn: c, r: bufio.NewReaderSize(c, 64<<10)}
	tc := tls.Client(cc, bulk(s.ca.clientTLS(s.leaf, p.rank, func(err error) {
		vmu.Lock()
		verr = err
		vmu.Unlock()
	})))
	me, conns := t.m.cfg.Rank, t.m.cfg.ConnsPerPeer
	done := within(ctx, c)
	err := func() error {
		if err := tc.HandshakeContext(ctx); err != nil {
			return err
		}
		if _, err := tc.Write(hello{from: me, to: p.rank, idx: idx, conns: conns}.encode()); err != nil {
			return err
		}
		// In TLS 1.3 the acceptor checks our certificate after our
		// handshake is over: its refusal is the alert read here.
		_, err := readHello(tc, hello{from: p.rank, to: me, idx: idx, conns: conns})
		return err
	}()
	done()
	if err != nil {
		c.Close()
		vmu.Lock()
		defer vmu.Unlock()
		if verr != nil {
			return nil, verr
		}
		return nil, tlsSetupError(err)
	}
	t.tune(c)
	return t.newLink(laneConn{tc, cc}, c, p), nil
}

// tlsSetupError marks the errors of a connection attempt that retrying
// cannot fix: the peer's TLS alert during the setup says it refused our
// certificate.
func tlsSetupError(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return fmt.Errorf("%w: it refused our certificate (%v): does it run with the same job key, job id and address list?", ErrAuth, err)
	}
	return err
}

// accept sets up the connection c that a higher rank dialed.
func (s *tlsLane) accept(ctx context.Context, t *tcpTransport, c *net.TCPConn) error {
	conf := bulk(s.ca.serverTLS(s.leaf, t.m.wantDialer, nil))
	conf.SessionTicketsDisabled = true // no resumption: nothing to send after the handshake
	cc := &corkConn{TCPConn: c, r: bufio.NewReaderSize(c, 64<<10)}
	tc := tls.Server(cc, conf)
	me, conns := t.m.cfg.Rank, t.m.cfg.ConnsPerPeer
	done := within(ctx, c)
	rank, hi, err := func() (int, hello, error) {
		if err := tc.HandshakeContext(ctx); err != nil {
			var (
				op *net.OpError
				rh tls.RecordHeaderError
			)
			switch {
			case errors.As(err, &op) && op.Op == "remote error":
				return -1, hello{}, fmt.Errorf("the dialer refused our certificate (%v): it runs with a different job key or job id", err)
			case errors.As(err, &rh) && bytes.HasPrefix(rh.RecordHeader[:], tcpMagic[:]):
				return -1, hello{}, errors.New("the dialer sent plain TCP's hello: it runs with network tcp, this rank with quic; every rank must use the same network")
			case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
				return -1, hello{}, fmt.Errorf("the dialer hung up during the TLS handshake (%v): did it refuse our certificate (a different job key or job id)?", err)
			}
			return -1, hello{}, err
		}
		rank, err := peerRank(tc.ConnectionState())
		if err != nil {
			return -1, hello{}, err
		}
		hi, err := readHello(tc, hello{from: rank, to: me, idx: -1, conns: conns})
		if err != nil {
			// Answer all the same, so that the dialer can say what
			// differs; the connection is refused.
			tc.Write(hello{from: me, to: hi.from, idx: hi.idx, conns: conns}.encode())
			return -1, hello{}, fmt.Errorf("rank %d: %w", rank, err)
		}
		return rank, hi, nil
	}()
	done()
	if err != nil {
		return err
	}
	t.tune(c)
	return t.m.registerAnswering(t.newLink(laneConn{tc, cc}, c, t.m.peers[rank]), hi.idx, func() error {
		_, err := tc.Write(hello{from: me, to: rank, idx: hi.idx, conns: conns}.encode())
		return err
	})
}

// corkSize is the most a TLS lane's connection gathers into one write to
// the socket while it writes a frame.
const corkSize = 256 << 10

// laneConn is a TLS lane's connection as its link uses it: a frame is
// written with the socket corked, so that TLS's records (16 KiB each, one
// write each) reach the kernel in writes of up to corkSize, and its
// outgoing direction ends with TLS's close_notify and then the socket's
// FIN.
type laneConn struct {
	*tls.Conn
	cork *corkConn
}

// Write writes p (a frame, or its header or payload) and flushes it.
func (c laneConn) Write(p []byte) (int, error) {
	c.cork.corked(true)
	n, err := c.Conn.Write(p)
	if ferr := c.cork.corked(false); err == nil && ferr != nil {
		n, err = 0, ferr
	}
	return n, err
}

// CloseWrite sends close_notify and ends the socket's outgoing direction.
func (c laneConn) CloseWrite() error {
	c.Conn.CloseWrite()
	return c.cork.CloseWrite()
}

// corkConn is the socket under a TLS lane's connection. While corked, the
// records TLS writes are gathered in a buffer (from the frame pool, held
// only while corked) and written when it is full or when uncorked.
// crypto/tls serializes its writes; the mutex keeps a record that TLS
// writes from its reading side (an alert) in order with the buffer.
type corkConn struct {
	*net.TCPConn
	r    *bufio.Reader // reads the socket for TLS, 64 KiB at a time: TLS asks for a record's worth
	mu   sync.Mutex
	cork bool
	buf  []byte
}

func (c *corkConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.cork {
		return c.TCPConn.Write(p)
	}
	if c.buf == nil {
		c.buf = transport.GetBuf(corkSize)[:0]
	}
	if len(c.buf)+len(p) > cap(c.buf) {
		if err := c.flush(); err != nil {
			return 0, err
		}
	}
	if len(p) > cap(c.buf) {
		return c.TCPConn.Write(p)
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// corked corks or uncorks the socket; uncorking writes what was gathered
// and returns the buffer to the pool.
func (c *corkConn) corked(on bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cork = on
	if on || c.buf == nil {
		return nil
	}
	err := c.flush()
	transport.PutBuf(c.buf)
	c.buf = nil
	return err
}

// flush writes the buffer; c.mu is held.
func (c *corkConn) flush() error {
	_, err := c.TCPConn.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}
