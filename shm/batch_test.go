package shm

import (
	"fmt"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm/commtest"
)

// TestBatch runs the batch suite (commtest.RunBatch) on shared memory,
// with slots small enough that the batches' larger calls take many steps.
func TestBatch(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			cfg := Config{SlotBytes: 16 << 10, Timeout: 30 * time.Second}
			commtest.RunBatch(t, asComms(localWorld(t, n, cfg)), commtest.Options{Timeout: 30 * time.Second})
		})
	}
}
