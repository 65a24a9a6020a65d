package hiercomm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nccl/ncclfake"
	"github.com/hiercomm/hiercomm/nexar"
	"github.com/hiercomm/hiercomm/topology"
)

// TestConnectGPUWiring builds, in one process, what Init builds on GPU
// nodes (compose over a flat world, NCCL among each node's ranks over
// their shared memory) on the fake library, for 2×2 (the hierarchy with
// NCCL inside nodes), 1×3 (one node: NCCL alone) and 3×1 (single-GPU
// nodes: the staged world), and runs the conformance suite on device
// buffers through it. (Across processes the fake cannot span a node: its
// NCCL world is one process's.)
func TestConnectGPUWiring(t *testing.T) {
	for _, tc := range []struct {
		layout []int
		want   string
	}{
		{[]int{2, 2}, "*hierarchy.Comm"},
		{[]int{3}, "*nccl.Comm"},
		{[]int{1, 1, 1}, "*nccl.Staged"},
	} {
		t.Run(fmt.Sprint(tc.layout), func(t *testing.T) {
			comms, dev := gpuWiring(t, tc.layout)
			if got := fmt.Sprintf("%T", comms[0]); got != tc.want {
				t.Fatalf("rank 0 runs on %s, want %s", got, tc.want)
			}
			o := commtest.Options{Timeout: time.Minute, Memory: dev, Counts: []int{0, 1, 7, 4099}}
			commtest.Run(t, comms, o)
			commtest.RunSplit(t, comms, o)
		})
	}
}

// gpuWiring builds, in one process, what Init builds on GPU nodes of the
// given layout (ranks per node) on the fake library, over an in-memory
// flat world; the communicators are closed when the test ends.
func gpuWiring(t *testing.T, layout []int) ([]comm.Communicator, *nccl.Device) {
	t.Helper()
	var members []topology.Member
	for n, g := range layout {
		for l := range g {
			members = append(members, topology.Member{Rank: len(members), Host: fmt.Sprintf("node-%d", n), Local: l, Device: 0})
		}
	}
	topo, err := topology.New(members)
	if err != nil {
		t.Fatal(err)
	}
	size := topo.Size()
	worlds, err := nexar.NewMemoryWorld(size, nexar.Options{ProbeAfter: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := ncclfake.New(ncclfake.Options{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	l := launchenv.Launch{JobID: fmt.Sprintf("gpuwiring-%d", time.Now().UnixNano()), Key: []byte("0123456789abcdef0123456789abcdef"), Network: "quic", Intra: "nccl"}
	opt := Options{Hierarchy: hierarchy.Config{SmallBytes: 64, ChunkBytes: 1024}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms := make([]comm.Communicator, size)
	errs := make(chan error, size)
	for r := range size {
		go func() {
			c, err := composeOver(ctx, l, topo, r, dev, opt, worlds[r])
			comms[r] = c
			errs <- err
		}()
	}
	for range size {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms, dev
}
