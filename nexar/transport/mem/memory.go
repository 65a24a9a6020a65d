// Package mem is the in-process transport: every Send copies the payload
// into a pooled buffer and hands it straight to the destination's Handler.
// It is what nexar's tests and simulations of thousands of ranks run on
// (nexar.NewMemoryWorld), and what the schedules are checked against
// without sockets. It imports comm and nexar/transport only.
package mem

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// network is what the ranks of one in-memory world share.
type network struct {
	mu       sync.Mutex // guards handlers and closed
	handlers []transport.Handler
	closed   []bool
}

// Transport is one rank of an in-memory world.
type Transport struct {
	net  *network
	rank int
}

// NewTransports returns len(hs) connected in-memory transports; rank i
// delivers what it receives to hs[i].
func NewTransports(hs []transport.Handler) []transport.Transport {
	n := &network{handlers: hs, closed: make([]bool, len(hs))}
	ts := make([]transport.Transport, len(hs))
	for i := range hs {
		ts[i] = &Transport{net: n, rank: i}
	}
	return ts
}

func (t *Transport) Rank() int                { return t.rank }
func (t *Transport) Size() int                { return len(t.net.handlers) }
func (t *Transport) PeerAddr(peer int) string { return fmt.Sprintf("memory:%d", peer) }

func (t *Transport) Send(ctx context.Context, peer int, h transport.Header, payload []byte) error {
	if peer < 0 || peer >= len(t.net.handlers) || peer == t.rank {
		return fmt.Errorf("memory transport: rank %d cannot send to peer %d", t.rank, peer)
	}
	if len(payload) > transport.MaxFrame {
		return fmt.Errorf("memory transport: frame of %d bytes exceeds MaxFrame", len(payload))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	t.net.mu.Lock()
	closed, dead := t.net.closed[t.rank], t.net.closed[peer]
	hd := t.net.handlers[peer]
	t.net.mu.Unlock()
	if closed {
		return transport.ErrClosed
	}
	if dead {
		return &comm.PeerError{Peer: peer, Addr: t.PeerAddr(peer), Err: fmt.Errorf("connection closed")}
	}
	b := transport.GetBuf(len(payload))
	copy(b, payload)
	h.Len = uint32(len(payload))
	hd.Deliver(t.rank, h, b)
	return nil
}

// SendNow is Send: a frame in memory never waits (transport.NowSender).
func (t *Transport) SendNow(peer int, h transport.Header, payload []byte) (bool, error) {
	return true, t.Send(context.Background(), peer, h, payload)
}

// Close marks this rank gone; the others see it as a failed peer, as they
// would a closed connection.
func (t *Transport) Close() error {
	t.net.mu.Lock()
	if t.net.closed[t.rank] {
		t.net.mu.Unlock()
		return nil
	}
	t.net.closed[t.rank] = true
	var notify []transport.Handler
	for i, h := range t.net.handlers {
		if i != t.rank && !t.net.closed[i] {
			notify = append(notify, h)
		}
	}
	t.net.mu.Unlock()
	for _, h := range notify {
		h.PeerFailed(t.rank, &comm.PeerError{Peer: t.rank, Addr: t.PeerAddr(t.rank), Err: transport.ErrPeerClosed})
	}
	return nil
}

// Kill simulates the death of this rank: every other rank sees it fail
// (not as a graceful close), and its own sends fail. For fault tests.
func (t *Transport) Kill() {
	t.net.mu.Lock()
	if t.net.closed[t.rank] {
		t.net.mu.Unlock()
		return
	}
	t.net.closed[t.rank] = true
	hs := append([]transport.Handler(nil), t.net.handlers...)
	t.net.mu.Unlock()
	for i, h := range hs {
		if i != t.rank {
			h.PeerFailed(t.rank, &comm.PeerError{Peer: t.rank, Addr: t.PeerAddr(t.rank), Err: errors.New("killed")})
		}
	}
}
