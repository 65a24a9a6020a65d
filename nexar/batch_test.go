package nexar_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/nexar"
)

// TestBatchMemory runs the batch suite (commtest.RunBatch: collectives and
// Send/Recv issued as one comm.Batch, a ring of them, buckets of
// AllReduces, bad input and mismatched batches) on the in-memory
// transport.
func TestBatchMemory(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			cs, err := nexar.NewMemoryWorld(n, nexar.Options{SegmentBytes: 4096, ProbeAfter: 50 * time.Millisecond, Timeout: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer nexar.CloseAll(cs)
			commtest.RunBatch(t, asComms(cs), commtest.Options{Timeout: 30 * time.Second})
		})
	}
}

// TestBatchNet runs the batch suite over QUIC and TCP on loopback.
func TestBatchNet(t *testing.T) {
	for _, network := range []string{"quic", "tcp"} {
		t.Run(network, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cs, err := nexar.NewLocalWorld(ctx, 3, network, nexar.Options{ProbeAfter: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer nexar.CloseAll(cs)
			commtest.RunBatch(t, asComms(cs), commtest.Options{Timeout: 30 * time.Second})
		})
	}
}
