package netmesh

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/nexar/transport"
)

// Benchmarks of the network transports on loopback, all ranks in this
// process:
//
//	go test -run '^$' -bench 'SendRecvRing|Stream|PingPong' -benchtime 10x -count 3 ./nexar/transport/netmesh/
//
// SendRecvRing: every rank sends size bytes to rank r+1 and receives size
// bytes from rank r−1 at the same time, the step of a ring collective.
// MB/s is per rank, so it is the ring's bus bandwidth. Messages are cut into
// max(ConnsPerPeer, ⌈size/MaxFrame⌉) frames sent concurrently, so that
// several connections can carry one message.
//
// Stream: rank 0 sends 1 MiB frames to rank 1 back to back, one Send at a
// time: the ceiling of one direction of one pair.
//
// PingPong: rank 0 sends 8 bytes to rank 1, which answers; one-way-µs is
// half the round trip.

// benchTransports are the transports and connection counts compared.
var benchTransports = []struct {
	name, network string
	conns         int
	dial          func(context.Context, Config, transport.Handler) (transport.Transport, error)
}{
	{"quic", "udp", 1, NewQUIC},
	{"quic-conns2", "udp", 2, NewQUIC},
	{"quic-conns4", "udp", 4, NewQUIC},
	{"tcp", "tcp", 1, NewTCP},
	{"tcp-conns2", "tcp", 2, NewTCP},
	{"tls", "tcp", 1, dialTLSLane},
	{"lanes", "udp+tcp", 1, NewLanes},
	{"lanes-conns2", "udp+tcp", 2, NewLanes},
}

// counter is a Handler that counts delivered bytes and wakes a waiter when
// a target is reached.
type counter struct {
	mu     sync.Mutex
	n      int64
	target int64
	done   chan struct{}
	frames atomic.Int64
}

func (c *counter) Deliver(_ int, _ transport.Header, p []byte) {
	n := int64(len(p))
	transport.PutBuf(p)
	c.frames.Add(1)
	c.mu.Lock()
	c.n += n
	if c.done != nil && c.n >= c.target {
		close(c.done)
		c.done = nil
	}
	c.mu.Unlock()
}

func (c *counter) PeerFailed(peer int, err error) {}

// expect arms the counter: the returned channel closes once n more bytes
// have been delivered.
func (c *counter) expect(n int64) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	done := make(chan struct{})
	c.target = c.n + n
	if c.n >= c.target {
		close(done)
	} else {
		c.done = done
	}
	return done
}

func BenchmarkSendRecvRing(b *testing.B) {
	sizes := []struct {
		name string
		n    int
	}{{"64KiB", 64 << 10}, {"1MiB", 1 << 20}, {"16MiB", 16 << 20}}
	for _, bt := range benchTransports {
		for _, ranks := range []int{2, 4} {
			b.Run(fmt.Sprintf("%s/%dranks", bt.name, ranks), func(b *testing.B) {
				cs := make([]*counter, ranks)
				hs := make([]transport.Handler, ranks)
				for i := range cs {
					cs[i] = &counter{}
					hs[i] = cs[i]
				}
				cfg := baseConfig()
				cfg.ConnsPerPeer = bt.conns
				cfg.FailureTimeout = 30 * time.Second
				trs := startMesh(b, bt.dial, bt.network, ranks, cfg, hs)
				for _, sz := range sizes {
					b.Run(sz.name, func(b *testing.B) {
						pieces := max(bt.conns, (sz.n+transport.MaxFrame-1)/transport.MaxFrame)
						piece := (sz.n + pieces - 1) / pieces
						msg := make([]byte, sz.n)
						ctx := context.Background()
						b.SetBytes(int64(sz.n))
						b.ResetTimer()
						for range b.N {
							var wg sync.WaitGroup
							dones := make([]<-chan struct{}, ranks)
							for r := range ranks {
								dones[r] = cs[r].expect(int64(sz.n))
							}
							for r := range ranks {
								for off := 0; off < sz.n; off += piece {
									wg.Go(func() {
										p := msg[off:min(off+piece, sz.n)]
										if err := trs[r].Send(ctx, (r+1)%ranks, transport.Header{Kind: transport.FrameData, Step: uint32(off / piece)}, p); err != nil {
											b.Error(err)
										}
									})
								}
							}
							wg.Wait()
							for _, d := range dones {
								<-d
							}
						}
					})
				}
			})
		}
	}
}

func BenchmarkStream(b *testing.B) {
	for _, bt := range benchTransports {
		b.Run(bt.name, func(b *testing.B) {
			cs := []*counter{{}, {}}
			cfg := baseConfig()
			cfg.ConnsPerPeer = bt.conns
			cfg.FailureTimeout = 30 * time.Second
			trs := startMesh(b, bt.dial, bt.network, 2, cfg, []transport.Handler{cs[0], cs[1]})
			msg := make([]byte, 1<<20)
			ctx := context.Background()
			b.SetBytes(int64(len(msg)))
			done := cs[1].expect(int64(b.N) * int64(len(msg)))
			b.ResetTimer()
			for i := range b.N {
				if err := trs[0].Send(ctx, 1, transport.Header{Kind: transport.FrameData, Step: uint32(i)}, msg); err != nil {
					b.Fatal(err)
				}
			}
			<-done
		})
	}
}

func BenchmarkPingPong(b *testing.B) {
	for _, bt := range benchTransports {
		if bt.conns != 1 {
			continue
		}
		b.Run(bt.name, func(b *testing.B) {
			pingPong(b, bt.dial, bt.network, 8)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/2, "one-way-µs")
		})
	}
}

// BenchmarkLaneFrame measures the one-way time of a frame (half a round
// trip, one frame at a time) on each lane of the default network, QUIC and
// the TLS lane, by size: the α-β of each lane, whose crossover is where
// BulkFrameMin puts the switch.
//
//	go test -run '^$' -bench 'LaneFrame' -benchtime 2000x -count 3 ./nexar/transport/netmesh/
func BenchmarkLaneFrame(b *testing.B) {
	for _, lane := range []struct {
		name, network string
		dial          func(context.Context, Config, transport.Handler) (transport.Transport, error)
	}{{"quic", "udp", NewQUIC}, {"tls", "tcp", dialTLSLane}} {
		for _, size := range []int{64, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10} {
			b.Run(fmt.Sprintf("%s/%d", lane.name, size), func(b *testing.B) {
				pingPong(b, lane.dial, lane.network, size)
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/2, "one-way-µs")
			})
		}
	}
}

// pingPong sends size bytes back and forth b.N times between the two ends
// of a mesh of dial's transport.
func pingPong(b *testing.B, dial func(context.Context, Config, transport.Handler) (transport.Transport, error), network string, size int) {
	cs := []*counter{{}, {}}
	cfg := baseConfig()
	cfg.FailureTimeout = 30 * time.Second
	trs := startMesh(b, dial, network, 2, cfg, []transport.Handler{cs[0], cs[1]})
	ctx := context.Background()
	msg := make([]byte, size)
	b.ResetTimer()
	for range b.N {
		got1 := cs[1].expect(int64(size))
		got0 := cs[0].expect(int64(size))
		if err := trs[0].Send(ctx, 1, transport.Header{Kind: transport.FrameP2P}, msg); err != nil {
			b.Fatal(err)
		}
		<-got1
		if err := trs[1].Send(ctx, 0, transport.Header{Kind: transport.FrameP2P}, msg); err != nil {
			b.Fatal(err)
		}
		<-got0
	}
}
