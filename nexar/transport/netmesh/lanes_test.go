package netmesh

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// laneSizes are frame sizes on both sides of BulkFrameMin.
var laneSizes = []int{0, 1, 100, BulkFrameMin - 1, BulkFrameMin, 256 << 10, 4 << 20}

// TestLanesBySize: each frame takes the lane its size chooses, frames on
// both lanes arrive intact, and a rank that sends a mix and closes at once
// loses nothing on either lane: its peer is told of the close once, after
// the last frame of both.
func TestLanesBySize(t *testing.T) {
	recs := []*recorder{newRecorder(), newRecorder()}
	recs[0].check = func(src int, h transport.Header, p []byte) error {
		if int(h.Step) >= len(laneSizes) || len(p) != laneSizes[h.Step] || !checkPattern(p, h.Seq) {
			return fmt.Errorf("frame %d (step %d) from rank %d: %d bytes, corrupt or the wrong size", h.Seq, h.Step, src, len(p))
		}
		return nil
	}
	trs := startMesh(t, NewLanes, "udp+tcp", 2, baseConfig(), []transport.Handler{recs[0], recs[1]})
	d := trs[1].(*lanes)
	for _, n := range laneSizes {
		if want := transport.Transport(d.small); n >= BulkFrameMin {
			if d.lane(n) != transport.Transport(d.bulk) {
				t.Errorf("a frame of %d bytes goes on QUIC, want the TLS lane", n)
			}
		} else if d.lane(n) != want {
			t.Errorf("a frame of %d bytes goes on the TLS lane, want QUIC", n)
		}
	}
	const rounds = 8
	var sent int
	for i := range rounds {
		for k, n := range laneSizes {
			p := make([]byte, n)
			seq := uint64(i*len(laneSizes) + k)
			pattern(p, seq)
			send := trs[1].Send
			if i%2 == 1 {
				// SendNow, or Send where the link is busy.
				send = func(ctx context.Context, peer int, h transport.Header, p []byte) error {
					if ok, err := d.SendNow(peer, h, p); ok || err != nil {
						return err
					}
					return trs[1].Send(ctx, peer, h, p)
				}
			}
			if err := send(context.Background(), 0, transport.Header{Kind: transport.FrameP2P, Seq: seq, Step: uint32(k)}, p); err != nil {
				t.Fatalf("send %d bytes: %v", n, err)
			}
			sent++
		}
	}
	trs[1].Close()
	r := recs[0]
	r.waitFor(t, 20*time.Second, "the report of the close", func() bool { return r.failed[1] != nil })
	r.mu.Lock()
	if r.atFail[1] != sent || !errors.Is(r.failed[1], transport.ErrPeerClosed) {
		t.Errorf("%d of %d frames before the report %v", r.atFail[1], sent, r.failed[1])
	}
	r.mu.Unlock()
	for _, n := range []int{0, BulkFrameMin} {
		if err := trs[0].Send(context.Background(), 1, transport.Header{Kind: transport.FrameData}, make([]byte, n)); !errors.Is(err, transport.ErrPeerClosed) {
			t.Errorf("Send of %d bytes to the closed peer = %v, want ErrPeerClosed", n, err)
		}
	}
	r.assertClean(t)
}

// breakLink closes the socket of p's first link on a TLS lane at once,
// with no goodbye: what a lane sees when its peer's connection dies.
func breakLink(t *testing.T, m *mesh, p int) {
	t.Helper()
	l := m.linksOf(m.peers[p])[0]
	l.sem <- struct{}{} // a writer holds the link: abort closes the socket
	l.abort("test")
	<-l.sem
}

// TestLanesOneLaneBreaks: when one lane's connection dies, the pair is
// failed: each side reports the other once (the first lane's report), the
// other lane is cut too, and sends of every size fail at once.
func TestLanesOneLaneBreaks(t *testing.T) {
	recs := []*recorder{newRecorder(), newRecorder()}
	trs := startMesh(t, NewLanes, "udp+tcp", 2, baseConfig(), []transport.Handler{recs[0], recs[1]})
	breakLink(t, trs[1].(*lanes).bulk.m, 0)
	for i, r := range recs {
		r.waitFor(t, 10*time.Second, "the report", func() bool { return r.failed[1-i] != nil })
	}
	time.Sleep(100 * time.Millisecond) // a second report would come now
	for i, r := range recs {
		r.assertClean(t) // one report each
		r.mu.Lock()
		err := r.failed[1-i]
		r.mu.Unlock()
		if !errors.Is(err, comm.ErrPeerFailed) || errors.Is(err, transport.ErrPeerClosed) {
			t.Errorf("rank %d: reported %v, want a failure", i, err)
		}
		for _, n := range []int{0, BulkFrameMin} {
			start := time.Now()
			err := trs[i].Send(context.Background(), 1-i, transport.Header{Kind: transport.FrameData}, make([]byte, n))
			if !errors.Is(err, comm.ErrPeerFailed) || strings.Count(err.Error(), " failed") > 1 {
				t.Errorf("rank %d: Send of %d bytes = %v, want ErrPeerFailed, said once", i, n, err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("rank %d: the failed Send took %v", i, d)
			}
		}
	}
}

// TestLanesClosedOnOneLaneOnly: a peer that closes one lane gracefully and
// loses the other is failed, not closed: frames on the lost lane may be
// gone.
func TestLanesClosedOnOneLaneOnly(t *testing.T) {
	recs := []*recorder{newRecorder(), newRecorder()}
	trs := startMesh(t, NewLanes, "udp+tcp", 2, baseConfig(), []transport.Handler{recs[0], recs[1]})
	d1 := trs[1].(*lanes)
	d1.small.Close()
	time.Sleep(200 * time.Millisecond) // rank 0 reads the QUIC lane's goodbye
	r := recs[0]
	r.mu.Lock()
	early := r.failed[1]
	r.mu.Unlock()
	if early != nil {
		t.Fatalf("rank 1 reported after closing one lane only: %v", early)
	}
	breakLink(t, d1.bulk.m, 0)
	r.waitFor(t, 10*time.Second, "the report", func() bool { return r.failed[1] != nil })
	r.mu.Lock()
	err := r.failed[1]
	r.mu.Unlock()
	if !errors.Is(err, comm.ErrPeerFailed) || errors.Is(err, transport.ErrPeerClosed) {
		t.Errorf("reported %v, want a failure that is not a close", err)
	}
	r.assertClean(t)
}

// TestLanesDropPeer: a peer declared dead from outside is cut on both
// lanes and reported once.
func TestLanesDropPeer(t *testing.T) {
	recs := []*recorder{newRecorder(), newRecorder()}
	trs := startMesh(t, NewLanes, "udp+tcp", 2, baseConfig(), []transport.Handler{recs[0], recs[1]})
	cause := errors.New("the membership says so")
	trs[0].(transport.PeerDropper).DropPeer(1, cause)
	r := recs[0]
	r.waitFor(t, 5*time.Second, "the report", func() bool { return r.failed[1] != nil })
	for _, n := range []int{0, BulkFrameMin} {
		if err := trs[0].Send(context.Background(), 1, transport.Header{Kind: transport.FrameData}, make([]byte, n)); !errors.Is(err, cause) {
			t.Errorf("Send of %d bytes = %v, want the drop's cause", n, err)
		}
	}
	// Rank 1 learns from both lanes that rank 0 gave it up; it reports
	// that once.
	recs[1].waitFor(t, 5*time.Second, "rank 1's report", func() bool { return recs[1].failed[0] != nil })
	time.Sleep(100 * time.Millisecond)
	for _, r := range recs {
		r.assertClean(t)
	}
}

// TestTLSLaneRefusesImpostors: a process with the job key that claims,
// in its hello, another rank than its certificate names, or that dials
// when its rank may not, is refused and never joins; the acceptor's
// formation error says why. (A process without the job key, or of
// another job, is TestNetWrongKey's.)
func TestTLSLaneRefusesImpostors(t *testing.T) {
	cfg := baseConfig()
	cfg.ConnectTimeout = 1500 * time.Millisecond
	cfgs, err := LocalConfigs("tcp", 3, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfgs[1:] {
		c.Listener.Close()
	}
	done := make(chan error, 1)
	go func() {
		tr, err := newTLSLane(context.Background(), cfgs[0], newRecorder())
		if tr != nil {
			tr.Close()
		}
		done <- err
	}()
	ca, err := newJobCA(cfg.JobKey, cfg.JobID)
	if err != nil {
		t.Fatal(err)
	}
	// impostor dials rank 0 with a leaf for rank cert and a hello from
	// rank from; it reports whether rank 0 took the connection as a link
	// (answered and kept it open) and the error that ended it.
	impostor := func(cert, from int) (bool, error) {
		leaf, err := ca.issueLeaf(cert)
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.DialTimeout("tcp", cfgs[0].Addrs[0], time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		tc := tls.Client(c, ca.clientTLS(leaf, 0, nil))
		if err := tc.Handshake(); err != nil {
			return false, err
		}
		if _, err := tc.Write(hello{from: from, to: 0, idx: 0, conns: 1}.encode()); err != nil {
			return false, err
		}
		if _, err := readHello(tc, hello{from: 0, to: from, idx: 0, conns: 1}); err != nil {
			return false, err
		}
		// Answered: a refused connection is closed right after; a link
		// stays open, silent.
		_, err = tc.Read(make([]byte, 1))
		return isTimeout(err), err
	}
	if joined, err := impostor(1, 2); joined {
		t.Errorf("a leaf for rank 1 joined as rank 2 (%v)", err)
	}
	if joined, err := impostor(0, 0); joined || !strings.Contains(fmt.Sprint(err), "bad certificate") {
		t.Errorf("rank 0's own identity dialing rank 0: joined %v, %v; want a TLS refusal", joined, err)
	}
	err = <-done
	t.Logf("rank 0: %v", err)
	for _, want := range []string{"its hello says rank 2 to rank 0, expected rank 1 to rank 0", "rank 0 may not dial rank 0"} {
		if !strings.Contains(fmt.Sprint(err), want) {
			t.Errorf("rank 0's error does not say %q: %v", want, err)
		}
	}
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestNetworkMismatch: a rank of network tcp and one of network quic
// never join (each waits for its ConnectTimeout), and the acceptor's error
// says that the networks differ.
func TestNetworkMismatch(t *testing.T) {
	for _, tcpDials := range []bool{true, false} {
		t.Run(fmt.Sprintf("tcp-dials=%v", tcpDials), func(t *testing.T) {
			cfg := baseConfig()
			cfg.ConnectTimeout = time.Second
			cfgs, err := LocalConfigs("udp+tcp", 2, cfg)
			if err != nil {
				t.Fatal(err)
			}
			tcpRank := 0
			if tcpDials {
				tcpRank = 1
			}
			cfgs[tcpRank].PacketConn.Close()
			cfgs[tcpRank].PacketConn = nil
			errs := make([]error, 2)
			done := make(chan struct{})
			for i := range 2 {
				go func() {
					defer func() { done <- struct{}{} }()
					network := "quic"
					if i == tcpRank {
						network = "tcp"
					}
					tr, err := New(context.Background(), network, cfgs[i], newRecorder())
					if tr != nil {
						tr.Close()
					}
					errs[i] = err
				}()
			}
			<-done
			<-done
			want := "it speaks TLS: it runs with network quic"
			if tcpDials {
				want = "it runs with network tcp, this rank with quic"
			}
			if !strings.Contains(fmt.Sprint(errs[0]), want) || errs[1] == nil {
				t.Errorf("acceptor: %v; dialer: %v; want the acceptor to say %q", errs[0], errs[1], want)
			}
		})
	}
}
