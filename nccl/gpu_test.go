package nccl_test

import (
	"context"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nexar"
)

// The real NCCL on a real GPU. These tests run on a GPU host (make
// gpu-test builds them, gpu-bin/run.sh runs them) and skip elsewhere with
// nccl.Available's reason. NCCL refuses two ranks of one communicator on
// one GPU, so a host with one GPU runs a communicator of one rank here;
// the root package's TestGPU* tests run several single-GPU processes.

// TestGPUConformanceWorld1 runs every suite on an nccl.Comm of one rank on
// device 0, made over an in-memory nexar world of one as its control:
// every op × dtype (f16 and bf16 included) × the default counts against
// the suite's sequential reference, with every buffer in device memory.
func TestGPUConformanceWorld1(t *testing.T) {
	dev := nccl.GPUTestDevice(t)
	c := world1(t, dev)
	t.Logf("running on %v", c)
	comms := []comm.Communicator{c}
	o := commtest.Options{Timeout: 2 * time.Minute, Memory: dev}
	commtest.Run(t, comms, o)
	// The other suites are about behaviour, not arithmetic: counts up to
	// a multi-chunk one keep them short.
	o.Counts = []int{0, 1, 7, 4099, 65537}
	t.Run("P2P", func(t *testing.T) { commtest.RunP2P(t, comms, o) })
	t.Run("NonBlocking", func(t *testing.T) { commtest.RunNonBlocking(t, comms, o) })
	t.Run("Split", func(t *testing.T) { commtest.RunSplit(t, comms, o) })
	t.Run("BadInput", func(t *testing.T) { commtest.RunBadInput(t, comms, o) })
	// No RunFused: comm.AllReduceFused packs Go memory, which a Comm
	// refuses (it takes device buffers only).
}

// world1 is an nccl.Comm of one rank on dev over an in-memory nexar world
// of one as its control, closed when the test ends.
func world1(t *testing.T, dev *nccl.Device) *nccl.Comm {
	t.Helper()
	controls, err := nexar.NewMemoryWorld(1, nexar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := nccl.New(ctx, controls[0], nccl.Config{Device: dev})
	if err != nil {
		controls[0].Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}
