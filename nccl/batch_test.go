package nccl_test

import (
	"fmt"
	"testing"

	"github.com/hiercomm/hiercomm/comm/commtest"
)

// TestBatchFake runs the batch suite (commtest.RunBatch) on device
// buffers over the fake library: the bucketed AllReduces and the ring of
// Send and Recv on device memory.
func TestBatchFake(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			comms, dev := fakeWorld(t, n)
			commtest.RunBatch(t, comms, options(dev))
		})
	}
}
