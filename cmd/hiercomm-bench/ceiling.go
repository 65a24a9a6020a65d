package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"math/bits"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar/transport"
	"github.com/hiercomm/hiercomm/nexar/transport/netmesh"
	"github.com/hiercomm/hiercomm/topology"
)

// rawTransport is nexar's bare transport (QUIC or TCP frames, no
// communicator, no collective) between rank 0 and the first rank of
// another node, over the same network and links as the run, measured in
// the same run: what our own frames cost, beside the machine's floor
// (socketFloor), which a small collective is judged against.
type rawTransport struct {
	Network string `json:"network"`
	From    int    `json:"from_rank"`
	To      int    `json:"to_rank"`
	// RTTUS is the median round trip of an 8-byte frame and its answer.
	RTTUS float64 `json:"rtt_us"`
	// StreamGBs is one direction, 1 MiB frames back to back.
	StreamGBs float64 `json:"stream_gbs"`
	// BurstUS is the time per frame of a burst of 8-byte frames sent back
	// to back, up to the answer to a ping sent after the last: what a
	// message costs its sender when it does not wait for anything (the
	// gap of the LogP model), which the simulation charges each send
	// (bench.SimModel.SendOverhead).
	BurstUS float64 `json:"burst_us,omitempty"`
	// DoublingUS is the median time of a recursive-doubling exchange of
	// 8-byte frames among all DoublingRanks ranks at once (log₂ P rounds,
	// each rank sending to and receiving from rank r XOR 2^k): what a
	// small AllReduce's messages cost on this machine with every rank
	// busy, as the round trip does with two. Measured when the world's
	// size is a power of two of at least 4.
	DoublingUS    float64 `json:"doubling_us,omitempty"`
	DoublingRanks int     `json:"doubling_ranks,omitempty"`
}

// Sizes of the raw measurement.
const (
	rawPings     = 1000
	rawWarmPings = 50
	rawFrame     = 1 << 20
	rawStreamFor = 300 * time.Millisecond
	rawBurst     = 2000
)

// Raw frames, by the Step of a FrameData header: a ping and its answer,
// stream data, the stream's end and its acknowledgement. An answer is its
// question's Step + 1.
const (
	rawPing uint32 = iota + 1
	rawPong
	rawData
	rawEnd
	rawEndAck
)

// measureRaw measures rawTransport. It is collective over c, the flat
// world (whose waits block in the network poller: the ranks that wait for
// the pair leave it the cores, where shared memory's waiters would spin):
// every rank takes part in the exchange of addresses; the two ranks of the
// pair build a transport of their own and measure. It returns the figures on
// rank 0 (nil elsewhere), or nil when they could not be measured (logged:
// the run goes on without them).
func measureRaw(ctx context.Context, c comm.Communicator, topo *topology.Topology, network string, log *slog.Logger) (*rawTransport, error) {
	P, me := c.Size(), c.Rank()
	if _, err := netmesh.SocketNetwork(network); P < 2 || err != nil {
		return nil, nil
	}
	a, b := measuredPair(topo)
	key := make([]byte, 32)
	if me == a {
		rand.Read(key)
	}
	if err := c.Broadcast(ctx, comm.Host(key), a); err != nil {
		return nil, err
	}
	// Each of the pair binds a port of its data address's host; the
	// others offer 0. Every rank sees every offer, so all agree whether
	// the pair goes on.
	var bd bound
	var bindErr error
	if me == a || me == b {
		bd, bindErr = bindPort(topo, me, network)
	}
	port := []int64{bd.port}
	release := bd.release
	pc, ln := bd.pc, bd.ln
	ports := make([]int64, P)
	if err := c.AllGather(ctx, comm.Host(port), comm.Host(ports)); err != nil {
		release()
		return nil, err
	}
	var out *rawTransport
	switch {
	case ports[a] == 0 || ports[b] == 0:
		if bindErr != nil {
			log.Warn("the raw transport's ceiling is not measured", "err", bindErr)
		}
		release()
	case me == a || me == b:
		addr := func(r int) string {
			host, _, _ := net.SplitHostPort(topo.Member(r).Addr)
			return net.JoinHostPort(host, strconv.FormatInt(ports[r], 10))
		}
		cfg := netmesh.Config{Addrs: []string{addr(a), addr(b)}, JobKey: key, JobID: "hiercomm-bench-raw",
			FailureTimeout: 10 * time.Second, ConnectTimeout: 20 * time.Second, PacketConn: pc, Listener: ln}
		if me == b {
			cfg.Rank = 1
		}
		r, err := pingStream(ctx, cfg, network, me == a)
		if err != nil {
			log.Warn("the raw transport's ceiling is not measured", "err", err)
		} else if me == a {
			r.Network, r.From, r.To = network, a, b
			out = r
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return out, err
	}
	if P >= 4 && P&(P-1) == 0 {
		us, err := measureDoubling(ctx, c, topo, network, key)
		switch {
		case err != nil:
			log.Warn("the bare doubling exchange is not measured", "err", err)
		case out != nil:
			out.DoublingUS, out.DoublingRanks = us, P
		}
	}
	return out, c.Barrier(ctx)
}

// measuredPair is the pair the round trips are measured between: rank 0
// and the first rank of another node (rank 1 on one node).
func measuredPair(topo *topology.Topology) (a, b int) {
	a, b = 0, 1
	for r := range topo.Size() {
		if topo.NodeOf(r) != topo.NodeOf(0) {
			return a, r
		}
	}
	return a, b
}

// bound is a port a rank bound on its data address's host for a bare
// transport: a UDP socket (quic-only), a TCP listener (tcp) or both on one
// port (quic: its two lanes), and its number (0 when nothing is bound).
type bound struct {
	pc   net.PacketConn
	ln   net.Listener
	port int64
}

// bindPort binds a port of rank me's data address's host for network.
func bindPort(topo *topology.Topology, me int, network string) (bound, error) {
	var b bound
	host, _, err := net.SplitHostPort(topo.Member(me).Addr)
	switch {
	case err != nil:
		return b, fmt.Errorf("rank %d's address %q: %w", me, topo.Member(me).Addr, err)
	case network == "quic":
		var ln *net.TCPListener
		var pc *net.UDPConn
		if ln, pc, err = netmesh.ListenBoth(net.ParseIP(host), 0); err == nil {
			b.ln, b.pc, b.port = ln, pc, int64(ln.Addr().(*net.TCPAddr).Port)
		}
	case network == "quic-only":
		if b.pc, err = net.ListenPacket("udp", net.JoinHostPort(host, "0")); err == nil {
			b.port = int64(b.pc.LocalAddr().(*net.UDPAddr).Port)
		}
	default:
		if b.ln, err = net.Listen("tcp", net.JoinHostPort(host, "0")); err == nil {
			b.port = int64(b.ln.Addr().(*net.TCPAddr).Port)
		}
	}
	return b, err
}

// release closes what b holds, when no transport takes it over.
func (b bound) release() {
	if b.pc != nil {
		b.pc.Close()
	}
	if b.ln != nil {
		b.ln.Close()
	}
}

// measureDoubling is collective over c: every rank binds a port, builds a
// bare transport to every other, and runs rawPings recursive-doubling
// exchanges of 8-byte frames (after rawWarmPings); rank 0 returns the
// median time of one. An error on any rank is every rank's (the ports are
// gathered, and the exchange's frames would never come): each rank then
// returns it without the figure.
func measureDoubling(ctx context.Context, c comm.Communicator, topo *topology.Topology, network string, key []byte) (float64, error) {
	P, me := c.Size(), c.Rank()
	bd, err := bindPort(topo, me, network)
	pc, ln := bd.pc, bd.ln
	ports := make([]int64, P)
	if gerr := c.AllGather(ctx, comm.Host([]int64{bd.port}), comm.Host(ports)); gerr != nil || slices.Contains(ports, 0) {
		bd.release()
		return 0, cmp.Or(err, gerr, fmt.Errorf("a rank could not bind a port"))
	}
	addrs := make([]string, P)
	for r := range P {
		h, _, _ := net.SplitHostPort(topo.Member(r).Addr)
		addrs[r] = net.JoinHostPort(h, strconv.FormatInt(ports[r], 10))
	}
	cfg := netmesh.Config{Addrs: addrs, Rank: me, JobKey: key, JobID: "hiercomm-bench-doubling",
		FailureTimeout: 10 * time.Second, ConnectTimeout: 20 * time.Second, PacketConn: pc, Listener: ln}
	h := &doublingHandler{got: make([]chan uint32, P)}
	for r := range h.got {
		h.got[r] = make(chan uint32, 8)
	}
	tr, err := netmesh.New(ctx, network, cfg, h)
	if err != nil {
		return 0, err
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute) // no timer per wait: the ceiling is tight
	defer cancel()
	frame := make([]byte, 8)
	times := make([]time.Duration, 0, rawPings)
	for i := range rawWarmPings + rawPings {
		t0 := time.Now()
		for bit := 1; bit < P; bit <<= 1 {
			peer := me ^ bit
			step := uint32(i*32 + bits.Len(uint(bit)))
			if err := tr.Send(ctx, peer, transport.Header{Kind: transport.FrameData, Step: step}, frame); err != nil {
				return 0, err
			}
			select {
			case got := <-h.got[peer]:
				if got != step {
					return 0, fmt.Errorf("doubling exchange: rank %d sent frame %d, want %d", peer, got, step)
				}
			case <-ctx.Done():
				return 0, fmt.Errorf("doubling exchange: waiting for rank %d: %w", peer, ctx.Err())
			}
		}
		if i >= rawWarmPings {
			times = append(times, time.Since(t0))
		}
	}
	slices.Sort(times)
	return float64(times[len(times)/2].Nanoseconds()) / 1e3, nil
}

// doublingHandler hands each peer's frames, in order, to the exchange.
type doublingHandler struct{ got []chan uint32 }

func (h *doublingHandler) Deliver(src int, hd transport.Header, p []byte) {
	transport.PutBuf(p)
	h.got[src] <- hd.Step
}

func (h *doublingHandler) PeerFailed(peer int, err error) {}

// rawHandler answers pings (rank 1 of the pair), wakes the waiter for
// answers (rank 0) and answers the stream's end, after which rank 1 is
// done. Deliver must not block on the network, so rank 1's answers go out
// from one goroutine (answer) that the read loop hands each question to.
type rawHandler struct {
	got chan uint32   // answers and end acknowledgements, for rank 0
	ask chan uint32   // questions to answer, for rank 1
	end chan struct{} // closed once rank 1 has acknowledged the end
}

func (h *rawHandler) Deliver(src int, hd transport.Header, p []byte) {
	// The payload is the handler's (a pooled buffer): given back, so that
	// the stream's receiver does not allocate 1 MiB a frame, and its
	// garbage collector does not run through the timing, as nexar's
	// receives do not.
	defer transport.PutBuf(p)
	switch {
	case hd.Step == rawData: // the sender times the stream: nothing to do
	case h.got != nil:
		select {
		case h.got <- hd.Step:
		default:
		}
	case hd.Step == rawPing || hd.Step == rawEnd:
		select {
		case h.ask <- hd.Step:
		default: // more than one question in flight: a broken peer
		}
	}
}

// answer sends rank 0 the answer to each question until the stream's end
// or ctx's.
func (h *rawHandler) answer(ctx context.Context, tr transport.Transport) {
	pong := make([]byte, 8)
	for {
		select {
		case step := <-h.ask:
			tr.Send(ctx, 0, transport.Header{Kind: transport.FrameData, Step: step + 1}, pong)
			if step == rawEnd {
				close(h.end)
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

func (h *rawHandler) PeerFailed(peer int, err error) {}

// pingStream runs the pair's side of the measurement; first is rank 0 of
// the pair, which measures and returns the figures.
func pingStream(ctx context.Context, cfg netmesh.Config, network string, first bool) (*rawTransport, error) {
	h := &rawHandler{end: make(chan struct{}), ask: make(chan uint32, 4)}
	if first {
		h.got = make(chan uint32, 4)
	}
	tr, err := netmesh.New(ctx, network, cfg, h)
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	if !first {
		// Rank 1 answers until the stream's end.
		actx, stop := context.WithCancel(ctx)
		defer stop()
		go h.answer(actx, tr)
		select {
		case <-h.end:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Minute):
			return nil, fmt.Errorf("raw transport: the stream did not end within a minute")
		}
	}
	wait := func(step uint32) error {
		select {
		case s := <-h.got:
			if s != step {
				return fmt.Errorf("raw transport: frame %d, want %d", s, step)
			}
			return nil
		case <-time.After(10 * time.Second):
			return fmt.Errorf("raw transport: no answer within 10s")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ping := make([]byte, 8)
	rtts := make([]time.Duration, 0, rawPings)
	for i := range rawWarmPings + rawPings {
		t0 := time.Now()
		if err := tr.Send(ctx, 1, transport.Header{Kind: transport.FrameData, Step: rawPing}, ping); err != nil {
			return nil, err
		}
		if err := wait(rawPong); err != nil {
			return nil, err
		}
		if i >= rawWarmPings {
			rtts = append(rtts, time.Since(t0))
		}
	}
	slices.Sort(rtts)
	t0 := time.Now()
	for range rawBurst {
		if err := tr.Send(ctx, 1, transport.Header{Kind: transport.FrameData, Step: rawData}, ping); err != nil {
			return nil, err
		}
	}
	if err := tr.Send(ctx, 1, transport.Header{Kind: transport.FrameData, Step: rawPing}, ping); err != nil {
		return nil, err
	}
	if err := wait(rawPong); err != nil {
		return nil, err
	}
	burst := time.Since(t0).Seconds() / rawBurst
	frame := make([]byte, rawFrame)
	t0 = time.Now()
	sent := 0
	for time.Since(t0) < rawStreamFor {
		if err := tr.Send(ctx, 1, transport.Header{Kind: transport.FrameData, Step: rawData}, frame); err != nil {
			return nil, err
		}
		sent += len(frame)
	}
	if err := tr.Send(ctx, 1, transport.Header{Kind: transport.FrameData, Step: rawEnd}, ping); err != nil {
		return nil, err
	}
	if err := wait(rawEndAck); err != nil {
		return nil, err
	}
	el := time.Since(t0).Seconds()
	return &rawTransport{RTTUS: float64(rtts[len(rtts)/2].Nanoseconds()) / 1e3, StreamGBs: float64(sent) / el / 1e9, BurstUS: burst * 1e6}, nil
}
