package hierarchy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/nexar"
	"github.com/hiercomm/hiercomm/topology"
)

// TestSuiteCatchesLeadShardOnly checks that the conformance suite fails a
// hierarchy with the reference stack's defect (nexar-nccl: after the intra
// ReduceScatter only the lead's shard is reduced across nodes), and passes
// the same hierarchy without it: rank-distinct data makes the other G-1
// shards wrong.
func TestSuiteCatchesLeadShardOnly(t *testing.T) {
	for _, broken := range []bool{false, true} {
		errs := runAllReduceSuite(t, broken)
		failed := 0
		for _, err := range errs {
			if err != nil {
				failed++
			}
		}
		switch {
		case broken && failed == 0:
			t.Fatal("the suite passed a hierarchy that reduces only the lead's shard across nodes")
		case broken && !strings.Contains(errs[1].Error(), "AllReduce"):
			t.Fatalf("rank 1's failure does not name the AllReduce: %v", errs[1])
		case !broken && failed > 0:
			t.Fatalf("the correct hierarchy failed: %v", errs)
		}
	}
}

// runAllReduceSuite runs the AllReduce cases of the suite on a 2×2
// hierarchy with the large path forced, and returns each rank's verdict.
func runAllReduceSuite(t *testing.T, leadShardOnly bool) []error {
	t.Helper()
	cfg := Config{SmallBytes: 64, ChunkBytes: 1024}
	hs, errs := built2x2(t, [4]Config{cfg, cfg, cfg, cfg})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	opt := commtest.Options{Kinds: []comm.Kind{comm.KindAllReduce}, DTypes: []comm.DType{comm.F32, comm.I64},
		Ops: []comm.ReduceOp{comm.Sum}, Counts: []int{4099}, Timeout: 30 * time.Second}
	for r := range 4 {
		hs[r].setLeadShardOnly(leadShardOnly)
		wg.Go(func() { errs[r] = commtest.RunRank(ctx, hs[r], opt) })
	}
	wg.Wait()
	return errs
}

// counting is a part that records the kind and send bytes of every
// collective started on it, and how many of each kind.
type counting struct {
	comm.Communicator
	mu    sync.Mutex
	kinds map[comm.Kind]int // send bytes by kind
	ops   map[comm.Kind]int // operations by kind
	peers []int             // the Peer of each Send and Recv, in order
}

func (c *counting) Start(ctx context.Context, call comm.Call) *comm.Work {
	c.mu.Lock()
	c.kinds[call.Kind] += call.Send.ByteLen()
	c.ops[call.Kind]++
	if call.Kind == comm.KindSend || call.Kind == comm.KindRecv {
		c.peers = append(c.peers, call.Peer)
	}
	c.mu.Unlock()
	return c.Communicator.Start(ctx, call)
}

// TestReduceScatterIsNoAllReduce checks the inter-node traffic of the 2D
// ReduceScatter (numr's hierarchical reduce_scatter ran a full AllReduce,
// twice the traffic): on every rail only ReduceScatters run, of N blocks
// per rank, which put (N-1)/N of them on the wire.
func TestReduceScatterIsNoAllReduce(t *testing.T) {
	const N, G, n = 2, 2, 1000
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hs, _, rails := countedHierarchy(ctx, t, N, G, Config{})
	errs := make([]error, N*G)
	var wg sync.WaitGroup
	for r := range N * G {
		wg.Go(func() {
			send := make([]float64, N*G*n)
			for i := range send {
				send[i] = float64(r*len(send) + i)
			}
			recv := make([]float64, n)
			errs[r] = hs[r].ReduceScatter(ctx, comm.Host(send), comm.Host(recv), comm.Sum)
			for i, v := range recv {
				want := 0.0
				for q := range N * G {
					want += float64(q*len(send) + r*n + i)
				}
				if v != want && errs[r] == nil {
					errs[r] = fmt.Errorf("rank %d: recv[%d] = %v, want %v", r, i, v, want)
				}
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		got := rails[r].kinds
		if len(got) != 1 || got[comm.KindReduceScatter] != N*n*8 {
			t.Errorf("rank %d: the rail ran %v (send bytes by kind); want only ReduceScatters of N·n = %d elements (%d bytes)", r, got, N*n, N*n*8)
		}
	}
}

// countedHierarchy builds the hierarchies of an N×G layout (node-major,
// in-process nexar world, cfg's tuning) whose world part and rails count
// what runs on them; they are closed when the test ends.
func countedHierarchy(ctx context.Context, t *testing.T, N, G int, cfg Config) (hs []*Comm, worlds, rails []*counting) {
	t.Helper()
	tp := nodeMajor(t, N, G)
	ws, err := nexar.NewMemoryWorld(N*G, nexar.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	hs = make([]*Comm, N*G)
	worlds, rails = make([]*counting, N*G), make([]*counting, N*G)
	errs := make([]error, N*G)
	var wg sync.WaitGroup
	for r := range N * G {
		wg.Go(func() {
			col := tp.Colors(r)
			intra, err := ws[r].Split(ctx, col.Intra, col.IntraKey)
			if err != nil {
				errs[r] = err
				return
			}
			rail, err := ws[r].Split(ctx, col.Rail, col.RailKey)
			if err != nil {
				errs[r] = err
				return
			}
			worlds[r] = &counting{Communicator: ws[r], kinds: map[comm.Kind]int{}, ops: map[comm.Kind]int{}}
			rails[r] = &counting{Communicator: rail, kinds: map[comm.Kind]int{}, ops: map[comm.Kind]int{}}
			c := cfg
			c.Topology, c.Rank, c.World, c.Intra, c.Rail = tp, r, worlds[r], intra, rails[r]
			hs[r], errs[r] = New(c)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, h := range hs {
			h.Close()
		}
	})
	return hs, worlds, rails
}

// nodeMajor is the topology of an N×G layout: N hosts of G ranks, numbered
// node by node.
func nodeMajor(t *testing.T, N, G int) *topology.Topology {
	t.Helper()
	var ms []topology.Member
	for r := range N * G {
		ms = append(ms, topology.Member{Rank: r, Host: fmt.Sprintf("host-%d", r/G), Local: r % G, Device: -1})
	}
	tp, err := topology.New(ms)
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// built2x2 runs Build on every rank of a 2×2 layout (in-process nexar
// world), rank r with cfgs[r], and returns each rank's hierarchy and
// error; what was built is closed when the test ends.
func built2x2(t *testing.T, cfgs [4]Config) ([]*Comm, []error) {
	t.Helper()
	tp := nodeMajor(t, 2, 2)
	ws, err := nexar.NewMemoryWorld(4, nexar.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hs, errs := make([]*Comm, 4), make([]error, 4)
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() { hs[r], errs[r] = Build(ctx, ws[r], tp, nil, cfgs[r]) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for r, h := range hs {
			if h != nil {
				h.Close()
			} else {
				ws[r].Close()
			}
		}
	})
	return hs, errs
}
