package nexar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// world is one rank's end of a Transport: it routes arrived frames to the
// communicators of this rank by id, and tracks which peers are gone. Every
// communicator of the rank (the world one and its splits) shares it.
type world struct {
	tr   transport.Transport
	rank int
	size int
	log  *slog.Logger
	news lastWords // failure news being sent (news.go); the world Comm's Close shuts it
	// crowded: this host runs many more of the world's ranks than it has
	// cores, so receives do not spin (Options.Spin); set by attach, with
	// pl, the transport if its receives can read its connections
	// themselves (nil: they cannot, and do not spin).
	crowded bool
	pl      transport.Poller

	mu      sync.Mutex                  // guards everything below (and tr while it is attached)
	pending []func(transport.Transport) // what waits for the transport (news.go)
	comms   map[uint64]*Comm            // live communicators by id
	early   map[uint64][]frame          // frames for communicators this rank has not created yet
	gone    map[uint64]bool             // ids of closed communicators: their late frames are dropped
	dead    map[int]error               // peers (world ranks) whose connection failed
	// acted: per dead peer, closed once its failure has been acted on
	// (every communicator that includes it aborted; news.go).
	acted   map[int]chan struct{}
	deathCh chan struct{} // closed and replaced each time a peer dies
	holds   int           // communicators that keep tr open: the world Comm and those shrunk (shrink.go)
	// expelledErr: a peer told this rank that it was given up (news.go);
	// Shrink then refuses (shrink.go).
	expelledErr error
}

// frame is an arrived frame, with its sender as a rank of the communicator
// it was addressed to (world rank while it waits in world.early).
type frame struct {
	src     int
	h       transport.Header
	payload []byte
}

// newWorld is rank's end of a world of size. Its rank and size are set
// before the transport exists, because the transport may report a peer
// (Handler.PeerFailed) from its own goroutines before its constructor has
// returned it.
func newWorld(log *slog.Logger, rank, size int) *world {
	return &world{
		rank:    rank,
		size:    size,
		log:     log,
		comms:   map[uint64]*Comm{},
		early:   map[uint64][]frame{},
		gone:    map[uint64]bool{},
		dead:    map[int]error{},
		acted:   map[int]chan struct{}{},
		deathCh: make(chan struct{}),
		holds:   1, // the world Comm's
	}
}

// attach gives w its transport, once the transport is formed; the
// Handler path reads w.tr only under w.mu (withTransport), and what waited
// for it runs now.
func (w *world) attach(tr transport.Transport) {
	busy := crowded(tr)
	pl, ok := tr.(transport.Poller)
	if ok && !pl.Pollable() {
		pl = nil
	}
	w.mu.Lock()
	w.tr, w.crowded, w.pl = tr, busy, pl
	pending := w.pending
	w.pending = nil
	w.mu.Unlock()
	for _, f := range pending {
		f(tr)
	}
}

// Deliver implements Handler.
func (w *world) Deliver(src int, h transport.Header, payload []byte) {
	if h.Kind == transport.FramePeerDown {
		w.onPeerDown(src, h, payload)
		return
	}
	w.mu.Lock()
	c := w.comms[h.Comm]
	if c == nil {
		if !w.gone[h.Comm] {
			w.early[h.Comm] = append(w.early[h.Comm], frame{src: src, h: h, payload: payload})
			payload = nil
		}
		w.mu.Unlock()
		transport.PutBuf(payload)
		return
	}
	w.mu.Unlock()
	c.deliver(src, h, payload)
}

// PeerFailed implements Handler: a crashed peer aborts every communicator
// that includes it, and every rank of the world is told (news.go);
// operations waiting on a peer that is gone (crashed or closed) fail.
func (w *world) PeerFailed(peer int, err error) { w.learned(peer, err, -1, -1) }

// peerState returns a channel that is closed when the next peer dies, and
// the failure of peer (a world rank), or nil while it lives.
func (w *world) peerState(peer int) (<-chan struct{}, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deathCh, w.dead[peer]
}

// deaths returns a channel that is closed when the next peer dies.
func (w *world) deaths() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deathCh
}

// register makes c reachable and hands it the frames that arrived for it
// before it existed.
func (w *world) register(c *Comm) error {
	w.mu.Lock()
	if _, ok := w.comms[c.id]; ok {
		w.mu.Unlock()
		return fmt.Errorf("nexar: communicator id %#x is already in use on rank %d", c.id, w.rank)
	}
	w.comms[c.id] = c
	early := w.early[c.id]
	delete(w.early, c.id)
	var deadErr error
	for _, p := range c.members {
		if err := w.dead[p]; err != nil && !errors.Is(err, transport.ErrPeerClosed) {
			deadErr = err // a clean close aborts nothing (see PeerFailed)
		}
	}
	w.mu.Unlock()
	if deadErr != nil {
		c.abort(c.ownPeerError(deadErr))
	}
	for _, f := range early {
		c.deliver(f.src, f.h, f.payload)
	}
	return nil
}

func (w *world) unregister(c *Comm) {
	w.mu.Lock()
	delete(w.comms, c.id)
	w.gone[c.id] = true
	w.mu.Unlock()
}

// send writes a frame to a world rank.
func (w *world) send(ctx context.Context, peer int, h transport.Header, payload []byte) error {
	h.Len = uint32(len(payload))
	if _, err := w.peerState(peer); err != nil {
		return err
	}
	if err := w.tr.Send(ctx, peer, h, payload); err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return w.sendError(peer, err)
	}
	return nil
}

// sendNow is send without waiting for a busy connection: it reports
// false, having sent nothing, when the transport would have to wait (or
// cannot tell: it is not a transport.NowSender).
func (w *world) sendNow(peer int, h transport.Header, payload []byte) (bool, error) {
	h.Len = uint32(len(payload))
	tr, ok := w.tr.(transport.NowSender)
	if !ok {
		return false, nil
	}
	if _, err := w.peerState(peer); err != nil {
		return true, err
	}
	sent, err := tr.SendNow(peer, h, payload)
	if err != nil {
		return true, w.sendError(peer, err)
	}
	return sent, nil
}

// sendError is the error of a failed send to peer: the peer's failure
// when it is known, else err as a PeerError.
//
// A transport that fails a send with a *comm.PeerError found the peer's
// connection broken: this rank saw the peer fail, and the world learns it
// here (news.go), before the operation that sent can fail and return. The
// transport's own report of the same failure comes later, from another
// goroutine (a broken write is reported asynchronously); had the world
// waited for it, a caller could Close on the send's error first, and the
// news that this rank saw the failure would never go out (a peer still
// waiting on this rank would then blame its close instead of the dead
// rank). A clean close is left to the transport's report: a peer's close
// seen on one connection is not yet the end of what it sent on the others.
func (w *world) sendError(peer int, err error) error {
	if _, err2 := w.peerState(peer); err2 != nil {
		return err2
	}
	if errors.As(err, new(*comm.PeerError)) {
		if !errors.Is(err, transport.ErrPeerClosed) {
			w.learned(peer, err, -1, -1)
			if _, err2 := w.peerState(peer); err2 != nil {
				return err2
			}
		}
		return err
	}
	return &comm.PeerError{Peer: peer, Addr: w.tr.PeerAddr(peer), Err: err}
}

// crowded reports whether this host runs more than twice as many ranks
// of tr's world as it has cores, by the transport's addresses: then no
// receive spins (Options.Spin).
func crowded(tr transport.Transport) bool {
	host := func(r int) string {
		h, _, err := net.SplitHostPort(tr.PeerAddr(r))
		if err != nil {
			return ""
		}
		return h
	}
	me, here := host(tr.Rank()), 0
	for r := range tr.Size() {
		if host(r) == me {
			here++
		}
	}
	return here > 2*runtime.NumCPU()
}
