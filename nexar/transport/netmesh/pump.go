package netmesh

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hiercomm/hiercomm/nexar/transport"
)

// The progress engine's read side of a TCP link.
//
// A link's bytes are read by whoever holds its pump: the link's read loop,
// parked in the netpoller until the socket is readable, or a receive that
// waits for a frame from that peer and, before it sleeps, reads the socket
// itself (transport.Poller's Poll, with non-blocking reads; nexar's
// Comm.await spins on it). Either delivers every frame the bytes it reads complete, to whichever receive
// it is for, so a frame someone already waits for reaches it without the
// read loop → handler → waiter hop and without a sleeping process being
// woken for it. The read loop reads until the socket is empty; a poll
// makes a few reads at most (pollReads).
//
// Why no byte is left unread: the read loop parks only after it has itself
// found the socket empty while holding the pump, and the netpoller wakes
// it for any byte that arrives after that (Go's netpoller is
// edge-triggered and remembers a readiness that comes before the park). A
// poll does not change this, whatever it reads or leaves: the bytes in
// the socket all came after the read loop last found it empty. A poll
// holds the pump only with TryLock, so it never waits behind the read
// loop. The end of the stream, or its failure, found by a poll is kept in
// the pump for the read loop, which wakes for it (the end is a readiness
// too) and returns it.
type pump struct {
	rc      syscall.RawConn
	deliver func(transport.Header, []byte) // the mesh's delivery of a frame from this link

	mu  sync.Mutex // its holder reads the socket and decodes
	fr  *frameReader
	end error // the stream's end (errEnded) or failure, once found; guarded by mu
	fd  int   // the socket, while the holder reads it
	// read counts the bytes read from the socket, by any holder.
	read atomic.Uint64

	// Made once, so that a poll allocates nothing.
	src     func([]byte) (int, error) // reads fd
	drainFD func(fd uintptr)
}

func newPump(c *net.TCPConn, deliver func(transport.Header, []byte)) (*pump, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	p := &pump{rc: rc, deliver: deliver, fr: newFrameReader()}
	p.src = func(b []byte) (int, error) {
		n, err := readFD(p.fd, b)
		p.read.Add(uint64(n))
		return n, err
	}
	p.drainFD = func(fd uintptr) { p.drainLocked(int(fd), pollReads) }
	return p, nil
}

// landAt lets the frames this pump reads land in the memory of the
// receives waiting for them (transport.Placer): src is the link's peer, mark
// what the mesh does for every frame a link delivers.
func (p *pump) landAt(pl transport.Placer, src int, mark func(transport.Header)) {
	p.fr.place = func(h transport.Header) []byte { return pl.Place(src, h, p) }
	p.fr.landed = func(h transport.Header, payload []byte) {
		mark(h)
		pl.Landed(src, h, payload)
	}
}

// Divert implements transport.Diverter: it takes buf, a landing this pump
// may be filling, back from it; once it returns, the pump writes no more
// into buf.
func (p *pump) Divert(buf []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fr.divert(buf)
}

// run is the link's read loop: it reads until the stream ends, and
// returns as readFrames does.
func (p *pump) run() error {
	err := p.rc.Read(func(fd uintptr) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return !p.drainLocked(int(fd), -1) // the socket is empty: park until it is readable
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fr.release()
	switch {
	case err != nil:
		p.end = err // the connection was closed here
		return err
	case p.end == errEnded:
		return nil
	}
	return p.end
}

// poll reads what has arrived, unless another goroutine holds the pump,
// and returns the bytes read from the socket so far, by anyone.
func (p *pump) poll() uint64 {
	if p.mu.TryLock() {
		if p.end == nil {
			p.rc.Control(p.drainFD)
		}
		p.mu.Unlock()
	}
	return p.read.Load()
}

// drainLocked reads fd until it would block, delivering every frame
// completed, or, with reads ≥ 0, until it has made that many reads; it
// reports whether it found the socket empty (false also once the stream
// has ended: p.end).
func (p *pump) drainLocked(fd int, reads int) (empty bool) {
	p.fd = fd
	for ; p.end == nil && reads != 0; reads-- {
		switch err := p.fr.read(p.src, p.deliver); err {
		case nil:
		case syscall.EAGAIN:
			return true
		default:
			p.end = err
		}
	}
	return false
}

// pollReads bounds the reads of one poll: a receive reads what came
// for it and the frames that came with it, but it does not take over a
// stream that keeps coming (a large message to another receive) — the
// read loop, which the netpoller wakes for those bytes, reads them.
// Stopping early leaves nothing behind: every byte in the socket came
// after the read loop last found it empty, so the netpoller has woken
// the read loop for it.
const pollReads = 4

// readFD is a non-blocking read(2) of fd into b: EAGAIN when nothing is
// there, io.EOF at the end of the stream.
func readFD(fd int, b []byte) (int, error) {
	for {
		n, err := syscall.Read(fd, b)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(b) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// Pollable implements transport.Poller: plain TCP's links have pumps.
func (t *tcpTransport) Pollable() bool { return t.sec == nil }

// Poll implements transport.Poller.
func (t *tcpTransport) Poll(peer int) (read uint64) {
	if peer < 0 || peer >= len(t.m.peers) || t.m.peers[peer] == nil {
		return 0
	}
	for _, l := range t.m.peers[peer].links {
		if l != nil && l.pump != nil {
			read += l.pump.poll()
		}
	}
	return read
}
