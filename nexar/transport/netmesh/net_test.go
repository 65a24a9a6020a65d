package netmesh

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// The network transports, by name, with the socket kind LocalConfigs binds
// for each.
var netKinds = []struct {
	name, network string
	dial          func(context.Context, Config, transport.Handler) (transport.Transport, error)
}{
	{"quic", "udp", NewQUIC},
	{"tcp", "tcp", NewTCP},
	{"tls", "tcp", dialTLSLane},
	{"lanes", "udp+tcp", NewLanes},
}

// dialTLSLane is newTLSLane as a Transport constructor.
func dialTLSLane(ctx context.Context, cfg Config, h transport.Handler) (transport.Transport, error) {
	t, err := newTLSLane(ctx, cfg, h)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// recorder is a Handler that counts frames per source, checks each with an
// optional function, and records failures.
type recorder struct {
	check func(src int, h transport.Header, p []byte) error // may be nil

	mu      sync.Mutex
	perSrc  map[int]int
	bytes   map[int]int
	bad     []string
	failed  map[int]error
	atFail  map[int]int // perSrc[peer] when the peer was reported failed
	changed chan struct{}
}

func newRecorder() *recorder {
	return &recorder{perSrc: map[int]int{}, bytes: map[int]int{}, failed: map[int]error{}, atFail: map[int]int{}, changed: make(chan struct{}, 1)}
}

func (r *recorder) poke() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) Deliver(src int, h transport.Header, p []byte) {
	var err error
	if r.check != nil {
		err = r.check(src, h, p)
	}
	n := len(p)
	transport.PutBuf(p)
	r.mu.Lock()
	r.perSrc[src]++
	r.bytes[src] += n
	if err != nil && len(r.bad) < 10 {
		r.bad = append(r.bad, err.Error())
	}
	if _, ok := r.failed[src]; ok {
		r.bad = append(r.bad, fmt.Sprintf("frame from rank %d delivered after it was reported failed", src))
	}
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) PeerFailed(peer int, err error) {
	r.mu.Lock()
	if _, dup := r.failed[peer]; dup {
		r.bad = append(r.bad, fmt.Sprintf("PeerFailed(%d) called twice", peer))
	}
	r.failed[peer] = err
	r.atFail[peer] = r.perSrc[peer]
	r.mu.Unlock()
	r.poke()
}

// waitFor waits until cond, evaluated under r.mu, holds.
func (r *recorder) waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.changed:
		case <-deadline.C:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("timed out after %v waiting for %s; frames per source %v, failed %v", timeout, what, r.perSrc, r.failed)
		}
	}
}

func (r *recorder) assertClean(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bad) > 0 {
		t.Fatalf("bad deliveries: %v", r.bad)
	}
}

// baseConfig is the configuration of the tests that move data. The failure
// timeout is generous: under the race detector on a small machine, quic-go
// is slow enough that a loaded connection can go quiet for seconds.
func baseConfig() Config {
	return Config{JobKey: testJobKey, JobID: "net-test", FailureTimeout: 20 * time.Second, ConnectTimeout: 20 * time.Second}
}

// raceEnabled reports whether the test binary has the race detector, which
// makes quic-go about ten times slower: the tests then move less data.
var raceEnabled = func() bool {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" {
				return s.Value == "true"
			}
		}
	}
	return false
}()

// startMesh starts n ranks of a transport in this process, concurrently,
// with configurations from LocalConfigs tweaked per rank, and closes them at
// the end of the test.
func startMesh(t testing.TB, dial func(context.Context, Config, transport.Handler) (transport.Transport, error), network string, n int, base Config, hs []transport.Handler) []transport.Transport {
	t.Helper()
	cfgs, err := LocalConfigs(network, n, base)
	if err != nil {
		t.Fatal(err)
	}
	trs := make([]transport.Transport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { trs[i], errs[i] = dial(context.Background(), cfgs[i], hs[i]) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, tr := range trs {
			if tr != nil {
				tr.Close()
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, tr := range trs {
		if tr.Rank() != i || tr.Size() != n || tr.PeerAddr((i+1)%n) != cfgs[0].Addrs[(i+1)%n] {
			t.Fatalf("rank %d: Rank %d Size %d PeerAddr %q", i, tr.Rank(), tr.Size(), tr.PeerAddr((i+1)%n))
		}
	}
	return trs
}

// pattern fills b with bytes that depend on seed and position.
func pattern(b []byte, seed uint64) {
	x := seed*0x9e3779b97f4a7c15 + 1
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], x+uint64(i))
	}
	for ; i < len(b); i++ {
		b[i] = byte(x>>8) + byte(i)
	}
}

func checkPattern(b []byte, seed uint64) bool {
	x := seed*0x9e3779b97f4a7c15 + 1
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if binary.LittleEndian.Uint64(b[i:]) != x+uint64(i) {
			return false
		}
	}
	for ; i < len(b); i++ {
		if b[i] != byte(x>>8)+byte(i) {
			return false
		}
	}
	return true
}

var allToAllSizes = []int{0, 1, 100, 1 << 20, transport.MaxFrame}

// allToAllHeader names a test frame: Comm is the sender, Seq the receiver,
// Step the size's index; Sig carries the size too.
func allToAllHeader(src, dst, k int) transport.Header {
	return transport.Header{Kind: transport.FrameData, Comm: uint64(src), Seq: uint64(dst), Step: uint32(k),
		Sig: comm.Signature{Kind: comm.KindAllToAll, DType: comm.U8, Root: int32(src), Count: int64(allToAllSizes[k])}}
}

func checkAllToAll(me int) func(src int, h transport.Header, p []byte) error {
	return func(src int, h transport.Header, p []byte) error {
		if h.Comm != uint64(src) || h.Seq != uint64(me) || int(h.Step) >= len(allToAllSizes) {
			return fmt.Errorf("rank %d: header %+v from rank %d", me, h, src)
		}
		want := allToAllHeader(src, me, int(h.Step))
		want.Len = uint32(len(p))
		if h != want || len(p) != allToAllSizes[h.Step] {
			return fmt.Errorf("rank %d: from %d got %+v with %d bytes, want %+v", me, src, h, len(p), want)
		}
		if !checkPattern(p, uint64(src*1000+me*10+int(h.Step))) {
			return fmt.Errorf("rank %d: payload of frame %d from rank %d is corrupt", me, h.Step, src)
		}
		return nil
	}
}

// sendSize reports whether frames of allToAllSizes[k] are sent in a world of
// n: all of them, except that under the race detector frames of MaxFrame
// are sent in worlds of two only, to keep the test within a minute.
func sendSize(n, k int) bool {
	return allToAllSizes[k] < transport.MaxFrame || !raceEnabled || n == 2
}

// TestNetAllToAll: every rank sends frames of every size to every other,
// all at once; each arrives once, intact, with its header and source.
func TestNetAllToAll(t *testing.T) {
	type world struct{ n, conns int }
	for _, k := range netKinds {
		for _, w := range []world{{2, 1}, {3, 1}, {4, 1}, {3, 3}} {
			t.Run(fmt.Sprintf("%s/%dranks/conns%d", k.name, w.n, w.conns), func(t *testing.T) {
				recs := make([]*recorder, w.n)
				hs := make([]transport.Handler, w.n)
				for i := range recs {
					recs[i] = newRecorder()
					recs[i].check = checkAllToAll(i)
					hs[i] = recs[i]
				}
				cfg := baseConfig()
				cfg.ConnsPerPeer = w.conns
				trs := startMesh(t, k.dial, k.network, w.n, cfg, hs)

				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				var wg sync.WaitGroup
				errc := make(chan error, w.n*w.n*len(allToAllSizes))
				for src := range w.n {
					for dst := range w.n {
						if src == dst {
							continue
						}
						// One goroutine per frame: concurrent Sends to one
						// peer must interleave safely.
						for k := range allToAllSizes {
							if !sendSize(w.n, k) {
								continue
							}
							wg.Go(func() {
								p := make([]byte, allToAllSizes[k])
								pattern(p, uint64(src*1000+dst*10+k))
								if err := trs[src].Send(ctx, dst, allToAllHeader(src, dst, k), p); err != nil {
									errc <- fmt.Errorf("rank %d to %d, frame %d: %w", src, dst, k, err)
								}
							})
						}
					}
				}
				wg.Wait()
				close(errc)
				for err := range errc {
					t.Fatal(err)
				}
				for i, r := range recs {
					want := 0
					for k := range allToAllSizes {
						if sendSize(w.n, k) {
							want++
						}
					}
					r.waitFor(t, 60*time.Second, fmt.Sprintf("rank %d's frames", i), func() bool {
						for src := range w.n {
							if src != i && r.perSrc[src] < want {
								return false
							}
						}
						return true
					})
					r.assertClean(t)
					r.mu.Lock()
					for src := range w.n {
						if src != i && r.perSrc[src] != want {
							t.Errorf("rank %d got %d frames from rank %d, want %d", i, r.perSrc[src], src, want)
						}
					}
					r.mu.Unlock()
				}
			})
		}
	}
}

// TestNetWrongKey: a rank with another job key, or of another job (the
// same key, another job id), cannot join; both sides fail, the dialer at
// once, the acceptor at its ConnectTimeout, and both say why.
func TestNetWrongKey(t *testing.T) {
	for _, k := range netKinds {
		for _, other := range []string{"key", "job"} {
			t.Run(k.name+"/"+other, func(t *testing.T) { wrongKey(t, k.network, k.dial, other) })
		}
	}
}

// wrongKey is a case of TestNetWrongKey: rank 1 has another job key
// (other "key") or job id ("job").
func wrongKey(t *testing.T, network string, dial func(context.Context, Config, transport.Handler) (transport.Transport, error), other string) {
	cfg := baseConfig()
	cfg.ConnectTimeout = 1500 * time.Millisecond
	cfgs, err := LocalConfigs(network, 2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// What the dialer's error says: the certificate's job (QUIC, TLS),
	// or that the key or the job id differs (plain TCP cannot tell which).
	says := []string{"job key"}
	if other == "key" {
		cfgs[1].JobKey = []byte("not the job key, but long enough")
	} else {
		cfgs[1].JobID = "another-job"
		says = []string{`this is job "another-job"`, "job id"}
	}
	errs := make([]error, 2)
	took := make([]time.Duration, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			start := time.Now()
			tr, err := dial(context.Background(), cfgs[i], newRecorder())
			took[i] = time.Since(start)
			if tr != nil {
				tr.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	t.Logf("acceptor (rank 0): %v", errs[0])
	t.Logf("dialer (rank 1): %v", errs[1])
	if !errors.Is(errs[1], ErrAuth) || !slices.ContainsFunc(says, func(s string) bool { return strings.Contains(errs[1].Error(), s) }) {
		t.Errorf("dialer: %v, want an ErrAuth that says one of %q", errs[1], says)
	}
	if took[1] >= cfg.ConnectTimeout {
		t.Errorf("dialer took %v to refuse: it should fail at once, not at its ConnectTimeout (%v)", took[1], cfg.ConnectTimeout)
	}
	if !errors.Is(errs[0], comm.ErrTimeout) || !strings.Contains(errs[0].Error(), "rank(s) [1]") || !strings.Contains(errs[0].Error(), "different job key") {
		t.Errorf("acceptor: %v, want a timeout naming rank 1", errs[0])
	}
	if took[0] > cfg.ConnectTimeout+2*time.Second {
		t.Errorf("acceptor took %v, ConnectTimeout is %v", took[0], cfg.ConnectTimeout)
	}
}

// TestNetConnectCanceled: a mesh whose peer never comes ends when ctx does.
func TestNetConnectCanceled(t *testing.T) {
	for _, k := range netKinds {
		t.Run(k.name, func(t *testing.T) {
			cfgs, err := LocalConfigs(k.network, 2, baseConfig())
			if err != nil {
				t.Fatal(err)
			}
			if cfgs[0].PacketConn != nil {
				cfgs[0].PacketConn.Close()
			}
			if cfgs[0].Listener != nil {
				cfgs[0].Listener.Close()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			tr, err := k.dial(ctx, cfgs[1], newRecorder()) // rank 0 is not there
			if tr != nil {
				tr.Close()
			}
			if !errors.Is(err, comm.ErrTimeout) || !strings.Contains(err.Error(), "could not connect to rank 0") {
				t.Fatalf("err = %v", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("took %v after a 300ms deadline", d)
			}
		})
	}
}

// TestNetGracefulClose: a rank that sends a burst and closes at once loses
// nothing; a peer that was not closing is told, after the last frame.
func TestNetGracefulClose(t *testing.T) {
	const (
		small = 48 // frames of 64 KiB
		large = 1  // frames of transport.MaxFrame/4
		bytes = small*64<<10 + large*transport.MaxFrame/4
	)
	burst := func(t *testing.T, tr transport.Transport, to int) {
		p := make([]byte, transport.MaxFrame/4)
		for i := range small + large {
			n := 64 << 10
			if i >= small {
				n = transport.MaxFrame / 4
			}
			if err := tr.Send(context.Background(), to, transport.Header{Kind: transport.FrameP2P, Seq: uint64(i)}, p[:n]); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
		}
	}
	for _, k := range netKinds {
		for _, conns := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/conns%d/one-way", k.name, conns), func(t *testing.T) {
				recs := []*recorder{newRecorder(), newRecorder()}
				cfg := baseConfig()
				cfg.FailureTimeout = 10 * time.Second
				cfg.ConnsPerPeer = conns
				trs := startMesh(t, k.dial, k.network, 2, cfg, []transport.Handler{recs[0], recs[1]})
				burst(t, trs[1], 0)
				start := time.Now()
				trs[1].Close()
				if d := time.Since(start); d > cfg.linger()*4/5 {
					t.Errorf("Close took %v: it waited out its linger instead of the peer's ack", d)
				}
				r := recs[0]
				r.waitFor(t, 20*time.Second, "the burst", func() bool { return r.perSrc[1] == small+large })
				r.waitFor(t, 5*time.Second, "the report of the close", func() bool { return r.failed[1] != nil })
				r.mu.Lock()
				if r.bytes[1] != bytes || r.atFail[1] != small+large || !errors.Is(r.failed[1], transport.ErrPeerClosed) || !errors.Is(r.failed[1], comm.ErrPeerFailed) {
					t.Errorf("got %d bytes, %d frames before the report %v", r.bytes[1], r.atFail[1], r.failed[1])
				}
				r.mu.Unlock()
				if err := trs[0].Send(context.Background(), 1, transport.Header{Kind: transport.FrameData}, nil); !errors.Is(err, transport.ErrPeerClosed) {
					t.Errorf("Send to the closed peer = %v, want ErrPeerClosed", err)
				}
				r.assertClean(t)
				recs[1].mu.Lock()
				if len(recs[1].failed) != 0 {
					t.Errorf("the closing rank reported %v", recs[1].failed)
				}
				recs[1].mu.Unlock()
			})
		}
		t.Run(k.name+"/both-ways", func(t *testing.T) {
			recs := []*recorder{newRecorder(), newRecorder(), newRecorder()}
			cfg := baseConfig()
			cfg.FailureTimeout = 10 * time.Second
			trs := startMesh(t, k.dial, k.network, 3, cfg, []transport.Handler{recs[0], recs[1], recs[2]})
			// Each rank sends its bursts and closes as soon as it has
			// received everything it expects: its own frames may still be
			// in flight then, and must arrive.
			var wg sync.WaitGroup
			for i, tr := range trs {
				wg.Go(func() {
					for j := range trs {
						if j != i {
							burst(t, tr, j)
						}
					}
					recs[i].waitFor(t, 30*time.Second, "the bursts", func() bool {
						for j := range trs {
							if j != i && recs[i].perSrc[j] < small+large {
								return false
							}
						}
						return true
					})
					tr.Close()
				})
			}
			wg.Wait()
			for i, r := range recs {
				r.assertClean(t)
				r.mu.Lock()
				for j := range trs {
					if j != i && r.bytes[j] != bytes {
						t.Errorf("rank %d got %d bytes from rank %d, want %d", i, r.bytes[j], j, bytes)
					}
				}
				r.mu.Unlock()
			}
		})
	}
}

func TestNetSendErrors(t *testing.T) {
	for _, k := range netKinds {
		t.Run(k.name, func(t *testing.T) {
			trs := startMesh(t, k.dial, k.network, 2, baseConfig(), []transport.Handler{newRecorder(), newRecorder()})
			ctx := context.Background()
			for _, to := range []int{-1, 0, 2} {
				if err := trs[0].Send(ctx, to, transport.Header{Kind: transport.FrameData}, nil); !errors.Is(err, comm.ErrInvalidArgument) {
					t.Errorf("Send to %d = %v", to, err)
				}
			}
			if err := trs[0].Send(ctx, 1, transport.Header{Kind: transport.FrameData}, make([]byte, transport.MaxFrame+1)); !errors.Is(err, comm.ErrInvalidArgument) {
				t.Errorf("Send of MaxFrame+1 bytes = %v", err)
			}
			canceled, cancel := context.WithCancel(ctx)
			cancel()
			if err := trs[0].Send(canceled, 1, transport.Header{Kind: transport.FrameData}, nil); !errors.Is(err, comm.ErrCanceled) {
				t.Errorf("Send with a canceled ctx = %v", err)
			}
			trs[0].Close()
			if err := trs[0].Send(ctx, 1, transport.Header{Kind: transport.FrameData}, nil); !errors.Is(err, comm.ErrClosed) {
				t.Errorf("Send after Close = %v", err)
			}
			if err := trs[0].Close(); err != nil {
				t.Errorf("second Close = %v", err)
			}
		})
	}
}

// SendNow on a link busy with another frame sends nothing and says so;
// once the link is free it sends, and the frame arrives.
func TestSendNowOnABusyLink(t *testing.T) {
	rec := newRecorder()
	trs := startMesh(t, NewTCP, "tcp", 2, baseConfig(), []transport.Handler{newRecorder(), rec})
	tr := trs[0].(*tcpTransport)
	links := tr.m.peers[1].links
	for _, l := range links {
		l.sem <- struct{}{} // every link to rank 1 is busy
	}
	if sent, err := tr.SendNow(1, transport.Header{Kind: transport.FrameP2P}, []byte{1}); sent || err != nil {
		t.Fatalf("SendNow on a busy link: sent %v, err %v; want false, nil", sent, err)
	}
	for _, l := range links {
		<-l.sem
	}
	if sent, err := tr.SendNow(1, transport.Header{Kind: transport.FrameP2P}, []byte{1}); !sent || err != nil {
		t.Fatalf("SendNow on a free link: sent %v, err %v; want true, nil", sent, err)
	}
	rec.waitFor(t, 10*time.Second, "the frame sent now", func() bool { return rec.perSrc[0] == 1 })
}

const childEnv = "HIERCOMM_NEXAR_TEST_CHILD"

// TestNetChildProcess is rank 1 of TestNetPeerDeath, run in a child
// process that the test kills.
func TestNetChildProcess(t *testing.T) {
	kind := os.Getenv(childEnv)
	if kind == "" {
		t.Skip("the peer process of TestNetPeerDeath")
	}
	cfg := baseConfig()
	cfg.Rank = 1
	cfg.Addrs = strings.Split(os.Getenv(childEnv+"_ADDRS"), ",")
	cfg.FailureTimeout = time.Second
	// The parent hands over the UDP socket, the TCP listener or both, in
	// that order, from file descriptor 3.
	fd := uintptr(3)
	var dial func(context.Context, Config, transport.Handler) (transport.Transport, error)
	for _, k := range netKinds {
		if k.name == kind {
			dial = k.dial
		}
	}
	if strings.HasPrefix(netKindOf(kind), "udp") {
		f := os.NewFile(fd, "UDP socket from the parent")
		pc, err := net.FilePacketConn(f)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		cfg.PacketConn = pc
		fd++
	}
	if strings.HasSuffix(netKindOf(kind), "tcp") {
		f := os.NewFile(fd, "TCP listener from the parent")
		ln, err := net.FileListener(f)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		cfg.Listener = ln
	}
	tr, err := dial(context.Background(), cfg, newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	time.Sleep(30 * time.Second) // until killed
	tr.Close()
}

// netKindOf is the socket kind of the transport named kind.
func netKindOf(kind string) string {
	for _, k := range netKinds {
		if k.name == kind {
			return k.network
		}
	}
	return ""
}

// socketFiles returns the files of cfg's UDP socket and TCP listener (those
// it has, in that order), for a child process, and closes the sockets.
func socketFiles(t *testing.T, cfg Config) []*os.File {
	t.Helper()
	var files []*os.File
	if pc, ok := cfg.PacketConn.(*net.UDPConn); ok {
		f, err := pc.File()
		pc.Close()
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if ln, ok := cfg.Listener.(*net.TCPListener); ok {
		f, err := ln.File()
		ln.Close()
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// TestNetPeerDeath: a peer process killed with SIGKILL is reported failed
// within FailureTimeout (plus slack), once, and later Sends fail fast.
func TestNetPeerDeath(t *testing.T) {
	for _, k := range netKinds {
		t.Run(k.name, func(t *testing.T) {
			cfg := baseConfig()
			cfg.FailureTimeout = time.Second
			cfgs, err := LocalConfigs(k.network, 2, cfg)
			if err != nil {
				t.Fatal(err)
			}
			files := socketFiles(t, cfgs[1])
			cmd := exec.Command(os.Args[0], "-test.run=^TestNetChildProcess$", "-test.v")
			cmd.Env = append(os.Environ(), childEnv+"="+k.name, childEnv+"_ADDRS="+strings.Join(cfgs[0].Addrs, ","))
			cmd.ExtraFiles = files
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				f.Close()
			}
			defer cmd.Wait()
			defer cmd.Process.Kill()
			ready := make(chan struct{})
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					if sc.Text() == "ready" {
						close(ready)
						break
					}
				}
				for sc.Scan() {
				}
			}()

			rec := newRecorder()
			tr, err := k.dial(context.Background(), cfgs[0], rec)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			select {
			case <-ready:
			case <-time.After(20 * time.Second):
				t.Fatal("the child did not join")
			}
			if err := tr.Send(context.Background(), 1, transport.Header{Kind: transport.FrameData}, []byte("hello")); err != nil {
				t.Fatalf("Send to the live child: %v", err)
			}
			killed := time.Now()
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			rec.waitFor(t, cfg.FailureTimeout+5*time.Second, "the report of the death", func() bool { return rec.failed[1] != nil })
			took := time.Since(killed)
			rec.mu.Lock()
			ferr := rec.failed[1]
			rec.mu.Unlock()
			t.Logf("reported after %v: %v", took, ferr)
			if took > cfg.FailureTimeout+1500*time.Millisecond {
				t.Errorf("reported %v after the kill; FailureTimeout is %v", took, cfg.FailureTimeout)
			}
			var perr *comm.PeerError
			if !errors.As(ferr, &perr) || perr.Peer != 1 || perr.Addr != cfgs[0].Addrs[1] || errors.Is(ferr, transport.ErrPeerClosed) {
				t.Errorf("reported %v, want a *comm.PeerError for rank 1 that is not a close", ferr)
			}
			start := time.Now()
			if err := tr.Send(context.Background(), 1, transport.Header{Kind: transport.FrameData}, []byte("x")); !errors.Is(err, comm.ErrPeerFailed) {
				t.Errorf("Send after the death = %v", err)
			}
			if d := time.Since(start); d > 100*time.Millisecond {
				t.Errorf("Send after the death took %v", d)
			}
			time.Sleep(100 * time.Millisecond)
			rec.assertClean(t) // PeerFailed once
		})
	}
}

func TestNetConfigValidate(t *testing.T) {
	good := Config{Rank: 1, Addrs: []string{"a:1", "b:2"}, JobKey: testJobKey}
	v, err := good.validate()
	if err != nil {
		t.Fatal(err)
	}
	if v.JobID != DefaultJobID || v.FailureTimeout != DefaultFailureTimeout || v.ConnectTimeout != DefaultConnectTimeout ||
		v.ConnsPerPeer != 1 || v.SocketBuffer != DefaultSocketBuffer || v.Logger == nil || good.Logger != nil || good.JobID != "" {
		t.Fatalf("defaults: %+v (caller's: %+v)", v, good)
	}
	v.Addrs[0] = "changed:1"
	v.JobKey[0]++
	if good.Addrs[0] != "a:1" || good.JobKey[0] != testJobKey[0] {
		t.Fatal("the validated copy shares slices with the caller's config")
	}
	tests := []struct {
		name, want string
		mod        func(*Config)
	}{
		{"no addrs", "Addrs", func(c *Config) { c.Addrs = nil }},
		{"rank", "Rank 2", func(c *Config) { c.Rank = 2 }},
		{"negative rank", "Rank -1", func(c *Config) { c.Rank = -1 }},
		{"bad addr", "Addrs[1]", func(c *Config) { c.Addrs = []string{"a:1", "nocolon"} }},
		{"no key", "JobKey", func(c *Config) { c.JobKey = nil }},
		{"short key", "JobKey has 15 bytes", func(c *Config) { c.JobKey = testJobKey[:15] }},
		{"job id", "JobID", func(c *Config) { c.JobID = "has space" }},
		{"negative", "negative", func(c *Config) { c.ConnectTimeout = -1 }},
		{"tiny timeout", "FailureTimeout", func(c *Config) { c.FailureTimeout = time.Microsecond }},
		{"conns", "ConnsPerPeer", func(c *Config) { c.ConnsPerPeer = 1000 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			c.Addrs = slices.Clone(good.Addrs)
			tt.mod(&c)
			if _, err := c.validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("validate = %v, want an error about %q", err, tt.want)
			}
			if _, err := NewQUIC(context.Background(), c, newRecorder()); err == nil {
				t.Fatal("NewQUIC accepted it")
			}
			if _, err := NewTCP(context.Background(), c, newRecorder()); err == nil {
				t.Fatal("NewTCP accepted it")
			}
		})
	}
}

func TestNetWorldOfOne(t *testing.T) {
	for _, k := range netKinds {
		t.Run(k.name, func(t *testing.T) {
			trs := startMesh(t, k.dial, k.network, 1, baseConfig(), []transport.Handler{newRecorder()})
			if err := trs[0].Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
