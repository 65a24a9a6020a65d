package netmesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/internal/hoptrace"
	"github.com/hiercomm/hiercomm/nexar/internal/timerpool"
	"github.com/hiercomm/hiercomm/nexar/transport"
	"golang.org/x/sync/errgroup"
)

// The mesh: what both network transports share.
//
// A mesh is the set of links of one rank: ConnsPerPeer links to every other
// rank, each a pair of byte streams carrying frames one way each. Rank i
// dials every j < i and accepts every j > i. The transports differ in how a
// link is made and torn down; the frame format, the read loop, failure
// reporting and the close protocol are here.
//
// Close protocol, per link: write the goodbye record and end the outgoing
// stream (FIN), then wait, at most the linger time, until the peer's
// incoming stream has ended with its goodbye (so the peer closed too and we
// have delivered everything it sent) and the peer has read everything we
// sent (acked; QUIC needs this because closing a QUIC connection discards
// unread data, TCP does not), or the connection is gone. A rank that reads
// a goodbye on every link from a peer while it is not closing reports the
// peer as failed with ErrPeerClosed, after every frame of that peer has been
// delivered, and ends its own streams to that peer so that the peer's Close
// returns without waiting out its linger.

type mesh struct {
	cfg      Config // validated
	h        transport.Handler
	log      *slog.Logger
	describe func(error) error          // says in the peer's terms what a transport error means
	explain  func() string              // may be nil: more on why ranks are missing, for the formation error
	gaveUp   func(error) bool           // may be nil: says that a link error is the peer cutting it because it gave this rank up
	peers    []*peer                    // by rank; nil at cfg.Rank
	stalls   atomic.Pointer[stallWatch] // set once formed: was this process stalled?
	beating  bool                       // the transport wants heartbeats (heartbeat.go); set before form
	beatStop chan struct{}              // closed by shutdown: the heartbeat goroutine ends

	formed  atomic.Bool    // formation is over: failures are reported to h
	closing atomic.Bool    // Close began: failures are no longer reported
	loops   sync.WaitGroup // read loops and transport goroutines that call h

	mu       sync.Mutex // guards missing, notes, stopped and the links of every peer during formation
	stopped  bool       // quiesce began: no more goroutines that call h
	missing  int        // links not yet registered
	complete chan struct{}
	notes    []string // why connection attempts were refused, for the formation error
}

type peer struct {
	rank  int
	addr  string
	links []*link // one per connection; set under mesh.mu during formation, fixed after
	next  atomic.Uint32
	once  sync.Once
	err   atomic.Pointer[comm.PeerError] // set once the peer failed or closed
	ended atomic.Int32                   // links whose incoming stream ended with a goodbye
	// marked: err was set by markPeer, and the links are not cut yet
	// (the next fail cuts them and reports).
	marked atomic.Bool
}

// link is one connection to a peer: w carries frames to it, r from it.
type link struct {
	peer *peer

	sem      chan struct{} // a mutex that honours ctx: its holder writes to w
	w        io.Writer     // guarded by sem
	finished bool          // the goodbye was written; guarded by sem
	finish   func() error  // ends the outgoing stream after the goodbye; guarded by sem

	r        io.Reader // or pump, which reads the connection itself
	pump     *pump
	onEnd    func()        // called when r ended with a goodbye (QUIC: ack it); may be nil
	readDone chan struct{} // closed when the read loop returned
	clean    bool          // r ended with a goodbye; written before readDone closes

	heard atomic.Bool // something arrived since the heartbeat goroutine last looked
	wrote atomic.Bool // a frame was written since the heartbeat goroutine last looked

	acked <-chan struct{} // the peer has read everything we sent (closed from the start where no ack is needed)
	gone  <-chan struct{} // closed when the connection is gone; nil if the transport cannot tell
	abort func(reason string)
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func newMesh(cfg Config, h transport.Handler, describe func(error) error) *mesh {
	m := &mesh{cfg: cfg, h: h, log: cfg.Logger, describe: describe, complete: make(chan struct{})}
	m.peers = make([]*peer, len(cfg.Addrs))
	for j, addr := range cfg.Addrs {
		if j != cfg.Rank {
			m.peers[j] = &peer{rank: j, addr: addr, links: make([]*link, cfg.ConnsPerPeer)}
			m.missing += cfg.ConnsPerPeer
		}
	}
	if m.missing == 0 {
		close(m.complete)
	}
	return m
}

func newLink(p *peer, w io.Writer, finish func() error, r io.Reader) *link {
	return &link{peer: p, sem: make(chan struct{}, 1), w: w, finish: finish, r: r,
		readDone: make(chan struct{}), acked: closedChan}
}

// note records why a connection attempt was refused, for the error of a
// formation that times out.
func (m *mesh) note(format string, a ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.notes) < 8 {
		m.notes = append(m.notes, fmt.Sprintf(format, a...))
	}
}

// register adds a link that finished its handshake and starts its read
// loop. It refuses a second link with the same index.
func (m *mesh) register(l *link, idx int) error {
	p := l.peer
	m.mu.Lock()
	defer m.mu.Unlock()
	if idx < 0 || idx >= len(p.links) {
		return fmt.Errorf("rank %d offered connection %d, but ConnsPerPeer is %d here", p.rank, idx, len(p.links))
	}
	if p.links[idx] != nil {
		return fmt.Errorf("rank %d already has connection %d: is another process running as rank %d?", p.rank, idx, p.rank)
	}
	p.links[idx] = l
	m.loops.Add(1)
	go m.readLoop(l)
	if m.missing--; m.missing == 0 {
		close(m.complete)
	}
	return nil
}

// registerAnswering registers l, a link this rank accepted as link idx,
// and writes the acceptor's answer with answer before any frame can go out
// on it: it holds the link meanwhile, since once the last link is
// registered the constructor returns and frames may be sent. A failure to
// answer is then the peer's failure, the link being the mesh's.
func (m *mesh) registerAnswering(l *link, idx int, answer func() error) error {
	l.sem <- struct{}{}
	defer func() { <-l.sem }()
	if err := m.register(l, idx); err != nil {
		return err
	}
	if err := answer(); err != nil {
		m.fail(l.peer, err, false)
	}
	return nil
}

// has reports whether p's link idx is registered.
func (m *mesh) has(p *peer, idx int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return idx < len(p.links) && p.links[idx] != nil
}

// linksOf returns the registered links of p.
func (m *mesh) linksOf(p *peer) []*link {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ls []*link
	for _, l := range p.links {
		if l != nil {
			ls = append(ls, l)
		}
	}
	return ls
}

// deliverer is how the frames read from l reach the handler.
func (m *mesh) deliverer(l *link) func(transport.Header, []byte) {
	return func(h transport.Header, payload []byte) {
		m.heard(l, h)
		if h.Kind != frameHeartbeat {
			m.h.Deliver(l.peer.rank, h, payload)
		}
	}
}

// heard is what every frame read from l does before it is handed over.
func (m *mesh) heard(l *link, h transport.Header) {
	l.heard.Store(true)
	if h.Kind != frameHeartbeat {
		hoptrace.Mark(hoptrace.Read, m.cfg.Rank, l.peer.rank, h.Seq, h.Step)
	}
}

// lands lets the frames l's pump reads land in the memory of the
// receives waiting for them, if the handler offers it (transport.Placer).
func (m *mesh) lands(l *link) {
	if pl, ok := m.h.(transport.Placer); ok && l.pump != nil {
		l.pump.landAt(pl, l.peer.rank, func(h transport.Header) { m.heard(l, h) })
	}
}

func (m *mesh) readLoop(l *link) {
	defer m.loops.Done()
	p := l.peer
	var err error
	if l.pump != nil {
		err = l.pump.run()
	} else {
		err = readFrames(l.r, m.deliverer(l))
	}
	l.clean = err == nil
	close(l.readDone)
	if err != nil {
		m.fail(p, err, false)
		return
	}
	if l.onEnd != nil {
		l.onEnd()
	}
	if int(p.ended.Add(1)) == m.cfg.ConnsPerPeer {
		m.peerClosed(p)
	}
}

// fail records that p failed, tears its links down and, once the mesh is
// formed and unless we are closing, reports it to the handler, once. From
// Send (async), the report is made on a goroutine of its own: the caller of
// Send may hold locks that the handler takes.
func (m *mesh) fail(p *peer, cause error, async bool) {
	perr := m.peerError(p, cause)
	first := false
	p.once.Do(func() {
		first = true
		p.err.Store(perr)
	})
	if !first {
		if !p.marked.CompareAndSwap(true, false) {
			return
		}
		perr = p.err.Load() // markPeer's cause
	}
	for _, l := range m.linksOf(p) {
		l.abort(fmt.Sprintf("rank %d gives up on rank %d: %v", m.cfg.Rank, p.rank, perr.Err))
	}
	m.report(p.rank, perr, async)
}

// peerError is what p's failure by cause is in this rank's terms.
func (m *mesh) peerError(p *peer, cause error) *comm.PeerError {
	perr := &comm.PeerError{Peer: p.rank, Addr: p.addr, Err: m.describe(cause)}
	if gap, timeout, ok := m.stalled(time.Now()); ok {
		// This process was stalled past FailureTimeout: the peers
		// expelled it, and a dead connection is its own doing. The
		// failure is this rank's (reported for p, whose link it is).
		return &comm.PeerError{Peer: m.cfg.Rank, Addr: "this rank, " + m.cfg.Addrs[m.cfg.Rank],
			Err: &comm.StalledError{Gap: gap, Timeout: timeout, Cause: perr.Err, What: fmt.Sprintf("its connection to rank %d is gone meanwhile, but rank %d is probably alive", p.rank, p.rank)}}
	}
	if m.gaveUp != nil && m.gaveUp(cause) {
		// The peer lives and gave this rank up: the failure is this
		// rank's, and no news of the peer (the runtime's failure news).
		return &comm.PeerError{Peer: m.cfg.Rank, Addr: "this rank, " + m.cfg.Addrs[m.cfg.Rank], Err: &transport.ExpelledError{Peer: p.rank, Cause: perr.Err}}
	}
	return perr
}

// markPeer records cause as peer's failure without cutting its links
// yet; the next fail (dropPeer) cuts them and reports it. A transport
// made of several meshes (lanes.go) marks a dropped peer on each before
// it cuts any: the peer answers a cut by cutting its own links to this
// rank, and a mesh not yet cut would take that answer for the cause.
func (m *mesh) markPeer(peer int, cause error) {
	if peer < 0 || peer >= len(m.peers) || m.peers[peer] == nil {
		return
	}
	p := m.peers[peer]
	perr := m.peerError(p, cause)
	p.once.Do(func() {
		p.err.Store(perr)
		p.marked.Store(true)
	})
}

// dropPeer cuts peer's links because a detector outside the transport
// declared it dead: later sends to it fail at once, and Close does not
// wait for a close protocol it will never run.
func (m *mesh) dropPeer(peer int, cause error) {
	if peer < 0 || peer >= len(m.peers) || m.peers[peer] == nil {
		return
	}
	m.fail(m.peers[peer], cause, false)
}

// report tells the handler that a peer failed or closed, unless the mesh is
// still forming (the constructor returns the error instead) or closing.
func (m *mesh) report(peer int, perr *comm.PeerError, async bool) {
	if !m.formed.Load() || m.closing.Load() {
		return
	}
	if !async {
		m.h.PeerFailed(peer, perr)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	m.loops.Add(1)
	go func() {
		defer m.loops.Done()
		m.h.PeerFailed(peer, perr)
	}()
}

// stalled reports whether this process was stalled recently enough to
// explain a failure found at now (see stallWatch).
func (m *mesh) stalled(now time.Time) (gap, timeout time.Duration, ok bool) {
	sw := m.stalls.Load()
	if sw == nil {
		return 0, 0, false
	}
	gap, ok = sw.stalled(now)
	return gap, m.cfg.FailureTimeout, ok
}

// quiesce waits until the handler is called no more; every link must have
// been aborted.
func (m *mesh) quiesce() {
	m.mu.Lock()
	m.stopped = true
	m.mu.Unlock()
	m.loops.Wait()
}

// peerClosed handles a peer that ended every link with a goodbye.
func (m *mesh) peerClosed(p *peer) {
	perr := &comm.PeerError{Peer: p.rank, Addr: p.addr, Err: transport.ErrPeerClosed}
	first := false
	p.once.Do(func() {
		first = true
		p.err.Store(perr)
	})
	if !first || m.closing.Load() {
		return
	}
	m.report(p.rank, perr, false)
	// Nothing we send now will be used: end our streams so that its Close
	// returns at once.
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.linger())
	defer cancel()
	for _, l := range m.linksOf(p) {
		m.finishLink(ctx, l)
	}
}

// send writes one frame to peer on the next of its links.
func (m *mesh) send(ctx context.Context, to int, h transport.Header, payload []byte) error {
	p, l, err := m.link(to, payload)
	if err != nil {
		return err
	}
	select {
	case l.sem <- struct{}{}:
	default:
		if err := acquire(ctx, l.sem); err != nil {
			return err
		}
	}
	defer func() { <-l.sem }()
	if ctx.Err() != nil {
		return tier.ContextError(ctx.Err())
	}
	return m.write(p, l, to, h, payload)
}

// sendNow is send without waiting: it reports false, having sent
// nothing, when the link is busy with another frame.
func (m *mesh) sendNow(to int, h transport.Header, payload []byte) (bool, error) {
	p, l, err := m.link(to, payload)
	if err != nil {
		return true, err
	}
	select {
	case l.sem <- struct{}{}:
	default:
		return false, nil
	}
	defer func() { <-l.sem }()
	return true, m.write(p, l, to, h, payload)
}

// link checks a frame for peer to and picks the next of its links.
func (m *mesh) link(to int, payload []byte) (*peer, *link, error) {
	if to < 0 || to >= len(m.peers) || to == m.cfg.Rank {
		return nil, nil, fmt.Errorf("nexar: rank %d: send to rank %d: no such peer in a world of %d: %w", m.cfg.Rank, to, len(m.peers), comm.ErrInvalidArgument)
	}
	if len(payload) > transport.MaxFrame {
		return nil, nil, fmt.Errorf("nexar: rank %d: send to rank %d: payload of %d bytes exceeds MaxFrame (%d): %w", m.cfg.Rank, to, len(payload), transport.MaxFrame, comm.ErrInvalidArgument)
	}
	if m.closing.Load() {
		return nil, nil, transport.ErrClosed
	}
	p := m.peers[to]
	if perr := p.err.Load(); perr != nil {
		return nil, nil, perr
	}
	return p, p.links[int(p.next.Add(1)-1)%len(p.links)], nil
}

// write writes a frame on l, whose semaphore the caller holds. A frame
// that is started is finished, whatever the caller's context does
// meanwhile: a frame cut short would corrupt the stream for every later
// one. Writes block only while the peer's receive window is full, and a
// peer that stops reading is declared failed within FailureTimeout, which
// ends them.
func (m *mesh) write(p *peer, l *link, to int, h transport.Header, payload []byte) error {
	if !l.finished {
		hoptrace.Mark(hoptrace.Write, m.cfg.Rank, to, h.Seq, h.Step)
		err := writeFrame(l.w, h, payload)
		hoptrace.Mark(hoptrace.Written, m.cfg.Rank, to, h.Seq, h.Step)
		if err == nil {
			l.wrote.Store(true)
			return nil
		}
		if !m.closing.Load() {
			m.fail(p, err, true)
		}
	}
	// The link was ended (we close, or the peer closed or failed) or broke.
	if perr := p.err.Load(); perr != nil && !m.closing.Load() {
		return perr
	}
	return transport.ErrClosed
}

// acquire waits for a busy link's semaphore until ctx ends or its
// deadline passes. A collective's op is a context whose Done closes only
// when it fails (transport.Expirer): its deadline is kept here with a
// pooled timer, as a waiting receive keeps it, so a send stuck behind
// another writer ends the op at its deadline.
func acquire(ctx context.Context, sem chan struct{}) error {
	var fire <-chan time.Time
	if d, ok := ctx.Deadline(); ok {
		t := timerpool.Get(time.Until(d))
		defer timerpool.Put(t)
		fire = t.C
	}
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return tier.ContextError(ctx.Err())
	case <-fire:
		if e, ok := ctx.(transport.Expirer); ok {
			e.Expired()
		}
		return tier.ContextError(context.DeadlineExceeded)
	}
}

// finishLink writes the goodbye and ends the outgoing stream of l, unless
// ctx ends first (a write to a stalled peer holds the link).
func (m *mesh) finishLink(ctx context.Context, l *link) {
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-l.sem }()
	if l.finished {
		return
	}
	l.finished = true
	if _, err := l.w.Write(goodbyeRecord); err == nil {
		_ = l.finish()
	}
}

// settle waits until l needs nothing more before its connection is closed:
// the peer's stream ended and the peer read all of ours, or the connection
// is gone. It reports false if ctx ended first.
func settle(ctx context.Context, l *link) bool {
	select {
	case <-l.readDone:
	case <-l.gone:
		return true
	case <-ctx.Done():
		return false
	}
	if !l.clean {
		return true
	}
	select {
	case <-l.acked:
		return true
	case <-l.gone:
		return true
	case <-ctx.Done():
		return false
	}
}

// shutdown runs the close protocol on every link, then tears every link
// down and waits for the read loops. The transport closes its sockets after.
func (m *mesh) shutdown() {
	m.closing.Store(true)
	if sw := m.stalls.Load(); sw != nil {
		sw.close()
	}
	if m.beatStop != nil {
		close(m.beatStop)
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.linger())
	defer cancel()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		lagging []int
	)
	for _, p := range m.peers {
		if p == nil {
			continue
		}
		for _, l := range m.linksOf(p) {
			wg.Go(func() {
				m.finishLink(ctx, l)
				if !settle(ctx, l) {
					mu.Lock()
					lagging = append(lagging, p.rank)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if len(lagging) > 0 {
		slices.Sort(lagging)
		m.log.Warn("nexar: closing before some peers finished the close protocol; frames in flight to or from them may be lost",
			"rank", m.cfg.Rank, "peers", slices.Compact(lagging), "linger", m.cfg.linger())
	}
	for _, p := range m.peers {
		if p == nil {
			continue
		}
		for _, l := range m.linksOf(p) {
			l.abort(fmt.Sprintf("rank %d closed", m.cfg.Rank))
		}
	}
	m.quiesce()
}

// permanent marks a connection error that retrying cannot fix.
type permanent struct{ error }

func (e permanent) Unwrap() error { return e.error }

// form makes every link of this rank within ConnectTimeout: dial makes
// link idx to a lower rank p (retried with backoff until it succeeds or
// fails permanently); accept, running until its ctx ends, registers the
// links that higher ranks dial. form returns once every link is registered.
func (m *mesh) form(ctx context.Context, dial func(ctx context.Context, p *peer, idx int) (*link, error), accept func(ctx context.Context)) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, m.cfg.ConnectTimeout)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	var lastErr sync.Map // peer rank -> last dial error
	for _, p := range m.peers[:m.cfg.Rank] {
		for idx := range p.links {
			g.Go(func() error {
				backoff := 20 * time.Millisecond
				for {
					l, err := dial(gctx, p, idx)
					if err == nil {
						if err = m.register(l, idx); err == nil {
							return nil
						}
						l.abort(err.Error())
						err = permanent{err}
					}
					var perm permanent
					if errors.As(err, &perm) || errors.Is(err, ErrAuth) {
						return fmt.Errorf("nexar: rank %d: connect to rank %d (%s): %w", m.cfg.Rank, p.rank, p.addr, err)
					}
					lastErr.Store(p.rank, err)
					t := time.NewTimer(backoff)
					select {
					case <-gctx.Done():
						t.Stop()
						return gctx.Err()
					case <-t.C:
					}
					backoff = min(2*backoff, time.Second)
				}
			})
		}
	}
	acceptCtx, stopAccept := context.WithCancel(gctx)
	var accepting sync.WaitGroup
	accepting.Go(func() { accept(acceptCtx) })
	g.Go(func() error {
		select {
		case <-m.complete:
			return nil
		case <-gctx.Done():
			return gctx.Err()
		}
	})
	err := g.Wait()
	stopAccept()
	accepting.Wait()
	if err == nil {
		m.stalls.Store(newStallWatch(m.cfg.FailureTimeout))
		m.formed.Store(true)
		if m.beating {
			m.beatStop = make(chan struct{})
			m.loops.Add(1)
			go m.heartbeats(m.beatStop)
		}
		var closed []*comm.PeerError
		for _, p := range m.peers {
			if p != nil {
				if perr := p.err.Load(); perr != nil {
					if !errors.Is(perr, transport.ErrPeerClosed) {
						return fmt.Errorf("nexar: rank %d: %w", m.cfg.Rank, perr)
					}
					// It connected and then closed cleanly (a rank with
					// nothing to do may close right after joining): the
					// mesh formed; the handler learns it is gone.
					closed = append(closed, perr)
				}
			}
		}
		for _, perr := range closed {
			m.h.PeerFailed(perr.Peer, perr)
		}
		m.log.Debug("nexar: mesh formed", "rank", m.cfg.Rank, "size", len(m.peers), "conns_per_peer", m.cfg.ConnsPerPeer, "took", time.Since(start))
		return nil
	}
	if ctx.Err() == nil || errors.Is(err, ErrAuth) {
		return err // a permanent failure of one link
	}
	// The deadline passed or the caller canceled: say who is missing.
	m.mu.Lock()
	defer m.mu.Unlock()
	var noDial, noAccept []int
	for _, p := range m.peers {
		if p == nil || !slices.Contains(p.links, nil) {
			continue
		}
		if p.rank < m.cfg.Rank {
			noDial = append(noDial, p.rank)
		} else {
			noAccept = append(noAccept, p.rank)
		}
	}
	msg := fmt.Sprintf("nexar: rank %d (%s): mesh not formed", m.cfg.Rank, m.cfg.Addrs[m.cfg.Rank])
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && time.Since(start) >= m.cfg.ConnectTimeout-time.Millisecond {
		msg += fmt.Sprintf(" within %v (ConnectTimeout)", m.cfg.ConnectTimeout)
	}
	for _, j := range noDial {
		msg += fmt.Sprintf("; could not connect to rank %d (%s)", j, m.cfg.Addrs[j])
		if e, ok := lastErr.Load(j); ok {
			msg += fmt.Sprintf(": %v", e)
		}
	}
	if len(noAccept) > 0 {
		msg += fmt.Sprintf("; no connection from rank(s) %v: are they running, with the same address list, job key and job id?", noAccept)
	}
	if len(m.notes) > 0 {
		msg += "; refused: " + fmt.Sprint(m.notes)
	}
	if m.explain != nil {
		if s := m.explain(); s != "" {
			msg += "; " + s
		}
	}
	return fmt.Errorf("%s: %w", msg, tier.ContextError(ctx.Err()))
}

// wantDialer reports whether rank may dial this one.
func (m *mesh) wantDialer(rank int) error {
	if rank <= m.cfg.Rank || rank >= len(m.peers) {
		return fmt.Errorf("rank %d may not dial rank %d (only ranks %d..%d do, in a world of %d)", rank, m.cfg.Rank, m.cfg.Rank+1, len(m.peers)-1, len(m.peers))
	}
	return nil
}
