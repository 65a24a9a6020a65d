package netmesh

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// The default network: two lanes between every pair of ranks.
//
// QUIC (quic.go) sets the pair up and carries the control frames and the
// small messages; the TLS lane (tlslane.go: TCP with TLS 1.3, authenticated
// by the same job CA) carries the large frames, which on QUIC cost several
// times the CPU per byte (quic_cpu_bench_test.go). Frames to one peer may
// arrive in any order (Transport), so each frame simply goes on the lane
// its size chooses (BulkFrameMin), and both lanes deliver to the same
// Handler.
//
// Failures: the first lane that reports a peer failed speaks for the pair,
// once; the other lane is then cut to that peer (DropPeer), which tells the
// peer, if it runs, that it was given up. A peer's graceful close is
// reported only when both lanes have seen it (every frame it sent on
// either has then been delivered); a clean close on one lane and a
// failure on the other is a failure. The TLS lane's TCP connections end the
// moment the peer's process does, however it dies (the kernel closes its
// sockets), so a killed rank is reported at once, where QUIC alone waits
// for its idle timeout: the lane is also the pair's death notice.

// BulkFrameMin is the payload size from which the default network sends a
// frame on its TLS lane rather than on QUIC. It is a constant, the same on
// every rank (though nothing breaks if it is not: a receiver takes frames
// from both lanes).
//
// It comes from the two lanes' α-β models, measured with
// BenchmarkLaneFrame (net_bench_test.go: one frame at a time, half a round
// trip, 2-core machine, loopback, medians of 3 runs in two sessions): QUIC
// α ≈ 18–25 µs, 1/β ≈ 2.8–4.1 µs per KiB (250–365 MB/s); the TLS lane α ≈
// 13–17 µs, 1/β ≈ 0.8–1.1 µs per KiB. The TLS lane is the faster at every
// size there, so the switch is not a crossover: it is QUIC's
// half-performance length n½ = α·β ≈ 6–7 KB, rounded up to a power of
// two. Below it a frame's time is mostly latency, and it takes QUIC,
// where it never waits behind a bulk frame on a TCP connection (a
// 256 KiB piece holds the TLS lane's connection for ~300 µs) and where
// control frames (probes, failure notices, the close of a Split child)
// travel; above it a frame's time is mostly bytes, which the TLS lane
// moves at 3–4 times QUIC's rate per CPU-second. The schedules cut large
// messages into SegmentBytes pieces (256 KiB by default), so every piece
// of a large collective goes on the TLS lane.
const BulkFrameMin = 8 << 10

// laneNames names the lanes, for messages.
var laneNames = [2]string{"QUIC", "TLS"}

// lanes is the transport of the default network.
type lanes struct {
	small *quicTransport
	bulk  *tcpTransport
	h     transport.Handler

	mu      sync.Mutex
	formed  bool         // both lanes formed: reports go to h, not to pending
	pending []laneReport // reports made before both lanes formed
	peers   []laneState  // by rank
}

type laneState struct {
	closed   [2]bool // the lane saw the peer close
	reported bool
	err      error // what was reported: a send to the peer on either lane fails with it
}

type laneReport struct {
	lane, peer int
	err        error
	failed     bool // not a close: the other lane is cut
}

// laneHandler is the Handler one lane is given.
type laneHandler struct {
	d    *lanes
	lane int // 0: QUIC, 1: TLS
}

func (lh laneHandler) Deliver(src int, h transport.Header, payload []byte) {
	lh.d.h.Deliver(src, h, payload)
}

func (lh laneHandler) PeerFailed(peer int, err error) { lh.d.laneFailed(lh.lane, peer, err) }

// NewLanes joins the mesh of len(cfg.Addrs) ranks over both lanes of the
// default network: QUIC on UDP Addrs[Rank] (or cfg.PacketConn) and TLS 1.3
// over TCP on the same host and port (or cfg.Listener; LocalConfigs with
// "udp+tcp" binds both). It returns once both lanes reach every peer, or
// fails as NewQUIC does; h receives both lanes' frames. The lanes form at
// the same time; the TLS lane has cfg.ConnsPerPeer connections to each
// peer, QUIC one. The transport takes over both sockets, even when it
// returns an error.
func NewLanes(ctx context.Context, cfg Config, h transport.Handler) (transport.Transport, error) {
	if _, err := cfg.validate(); err != nil {
		if cfg.PacketConn != nil {
			cfg.PacketConn.Close()
		}
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return nil, err
	}
	d := &lanes{h: h, peers: make([]laneState, len(cfg.Addrs))}
	qcfg, tcfg := cfg, cfg
	qcfg.Listener, qcfg.ConnsPerPeer = nil, 1
	tcfg.PacketConn = nil
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		errs  [2]error // QUIC's, the TLS lane's
		first = -1     // the lane that failed first
	)
	failed := func(lane int, err error) {
		mu.Lock()
		defer mu.Unlock()
		errs[lane] = err
		if first < 0 {
			first = lane
		}
		if !errors.Is(err, comm.ErrTimeout) {
			// The other lane cannot form either. (At the deadline
			// both end by themselves, and each says what it saw.)
			cancel()
		}
	}
	wg.Go(func() {
		if t, err := NewQUIC(ctx, qcfg, laneHandler{d, 0}); err != nil {
			failed(0, err)
		} else {
			d.small = t.(*quicTransport)
		}
	})
	wg.Go(func() {
		if t, err := newTLSLane(ctx, tcfg, laneHandler{d, 1}); err != nil {
			failed(1, err)
		} else {
			d.bulk = t
		}
	})
	wg.Wait()
	if first >= 0 {
		if d.small != nil {
			d.small.Close()
		}
		if d.bulk != nil {
			d.bulk.Close()
		}
		// The lane that failed first says why; the other one adds what
		// it saw unless it only stopped because of the first.
		err := errs[first]
		if o := errs[1-first]; o != nil && !errors.Is(o, comm.ErrCanceled) && !errors.Is(o, context.Canceled) {
			err = fmt.Errorf("%w; the %s lane: %v", err, laneNames[1-first], o)
		}
		return nil, err
	}
	d.mu.Lock()
	d.formed = true
	pending := d.pending
	d.pending = nil
	d.mu.Unlock()
	for _, r := range pending {
		d.report(r)
	}
	return d, nil
}

// laneFailed is a lane's report that peer failed or closed.
func (d *lanes) laneFailed(lane, peer int, err error) {
	closed := errors.Is(err, transport.ErrPeerClosed)
	d.mu.Lock()
	st := &d.peers[peer]
	if st.reported {
		d.mu.Unlock()
		return
	}
	if closed {
		st.closed[lane] = true
		if !st.closed[1-lane] {
			d.mu.Unlock()
			return // the other lane may still carry its last frames
		}
	}
	st.reported, st.err = true, err
	r := laneReport{lane, peer, err, !closed}
	if !d.formed {
		// The lanes may not both exist yet.
		d.pending = append(d.pending, r)
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	d.report(r)
}

// report cuts the other lane to a failed peer, so that no send to it
// succeeds once the handler knows (the other lane's report of the cut is
// dropped by laneFailed), and tells the handler.
func (d *lanes) report(r laneReport) {
	if r.failed {
		cause := r.err
		if pe := (*comm.PeerError)(nil); errors.As(cause, &pe) {
			cause = pe.Err // the other lane names the peer itself
		}
		d.other(r.lane).DropPeer(r.peer, cause)
	}
	d.h.PeerFailed(r.peer, r.err)
}

// other returns the lane that is not lane.
func (d *lanes) other(lane int) transport.PeerDropper {
	if lane == 0 {
		return d.bulk
	}
	return d.small
}

// lane is the lane of a frame of n payload bytes.
func (d *lanes) lane(n int) transport.Transport {
	if n >= BulkFrameMin {
		return d.bulk
	}
	return d.small
}

func (d *lanes) Rank() int                { return d.small.Rank() }
func (d *lanes) Size() int                { return d.small.Size() }
func (d *lanes) PeerAddr(peer int) string { return d.small.PeerAddr(peer) }

// Send writes one frame to peer on the lane its size chooses; see
// Transport.
func (d *lanes) Send(ctx context.Context, peer int, h transport.Header, payload []byte) error {
	return d.failure(peer, d.lane(len(payload)).Send(ctx, peer, h, payload))
}

// SendNow is Send without waiting for a connection that is busy
// (transport.NowSender).
func (d *lanes) SendNow(peer int, h transport.Header, payload []byte) (bool, error) {
	sent, err := d.lane(len(payload)).(transport.NowSender).SendNow(peer, h, payload)
	return sent, d.failure(peer, err)
}

// failure is a lane's error err of a send to peer, in the pair's words: a
// peer reported failed or closed fails every send with what was
// reported, whichever lane saw it first — the other lane may have seen
// the consequence instead (cut by the peer, which heard of the drop on
// the first lane before this rank cut the second).
func (d *lanes) failure(peer int, err error) error {
	if err == nil || peer < 0 || peer >= len(d.peers) {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if first := d.peers[peer].err; first != nil {
		return first
	}
	return err
}

// Close runs both lanes' close protocols at once, so that it waits at most
// min(FailureTimeout, 5 s) in all. After Close returns the handler is
// called no more.
func (d *lanes) Close() error {
	var wg sync.WaitGroup
	wg.Go(func() { d.small.Close() })
	wg.Go(func() { d.bulk.Close() })
	wg.Wait()
	return nil
}

// DropPeer implements transport.PeerDropper: both lanes are cut.
// Both are marked with cause first (mesh.markPeer): cutting one makes
// the peer cut its own links, and the other, still uncut, would take
// that answer for the cause.
func (d *lanes) DropPeer(peer int, cause error) {
	d.small.m.markPeer(peer, cause)
	d.bulk.m.markPeer(peer, cause)
	d.small.DropPeer(peer, cause)
	d.bulk.DropPeer(peer, cause)
}

// Stalled implements transport.Staller: both lanes watch the process,
// from the same moment, so either says the same.
func (d *lanes) Stalled(now time.Time) (gap, timeout time.Duration, ok bool) {
	return d.small.Stalled(now)
}
