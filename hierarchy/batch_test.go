package hierarchy_test

import (
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm/commtest"
)

// TestBatch runs the batch suite (commtest.RunBatch) on every layout,
// with nexar and with shared memory inside the nodes: a batch passes
// through the hierarchy call by call, and its fingerprint into the
// phases' Outer.
func TestBatch(t *testing.T) {
	for _, l := range layouts {
		for _, intra := range []string{"nexar", "shm"} {
			t.Run(l.name+"/"+intra, func(t *testing.T) {
				commtest.RunBatch(t, build(t, l, intra, small), commtest.Options{Timeout: time.Minute})
			})
		}
	}
}

// TestBatchDevice runs the batch suite on device buffers, with the nccl
// fake inside the nodes.
func TestBatchDevice(t *testing.T) {
	for _, l := range deviceLayouts[:3] {
		t.Run(l.name, func(t *testing.T) {
			comms, dev := buildDevice(t, l, small, ownStager)
			commtest.RunBatch(t, comms, commtest.Options{Timeout: time.Minute, Memory: dev})
		})
	}
}
