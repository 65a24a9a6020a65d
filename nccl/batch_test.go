package nccl_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nccl/ncclfake"
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

// A batch's collectives are queued as one NCCL group, each call once;
// a collective of no elements queues nothing, and the results are right
// (one rank: its own data, the average of one rank included).
func TestBatchIsOneGroup(t *testing.T) {
	lib := ncclfake.New(ncclfake.Options{})
	calls := nccl.TraceGroups(lib)
	dev, err := lib.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	c := world1(t, dev)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := len(calls())

	in := [][]float32{{1, 2, 3}, {}, {4.5}, {-1, 8}}
	bufs := make([]comm.Buffer, len(in))
	var b comm.Batch
	for i, v := range in {
		buf, err := dev.Alloc(comm.F32, len(v))
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Free(buf)
		if err := dev.Write(buf, f32Bytes(v)); err != nil {
			t.Fatal(err)
		}
		bufs[i] = buf
		if i == 3 {
			b.Broadcast(buf, 0)
		} else {
			b.AllReduce(buf, buf, comm.Avg)
		}
	}
	if err := b.Run(ctx, c); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(calls()[before:], " ")
	if want := "GroupStart AllReduce AllReduce Broadcast GroupEnd"; got != want {
		t.Errorf("NCCL calls of the batch: %s; want %s", got, want)
	}
	for i, v := range in {
		out := make([]byte, 4*len(v))
		if err := dev.Read(out, bufs[i]); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, f32Bytes(v)) {
			t.Errorf("buffer %d holds %v; want %v", i, out, f32Bytes(v))
		}
	}
}

func f32Bytes(v []float32) []byte {
	out := make([]byte, 0, 4*len(v))
	for _, x := range v {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(x))
	}
	return out
}

// TestGPUBatch runs the batch suite on the real NCCL, on a communicator
// of one rank on a real GPU (make gpu-test builds it; it skips without a
// GPU): the batches' collectives in one NCCL group on device memory —
// the buckets of AllReduces, and AllToAll's own group nested in the
// batch's — with every result checked. One rank has no peer to disagree
// with: the mismatch cases run on the fake (TestBatchFake).
func TestGPUBatch(t *testing.T) {
	dev := nccl.GPUTestDevice(t)
	c := world1(t, dev)
	t.Logf("running on %v", c)
	commtest.RunBatch(t, []comm.Communicator{c}, commtest.Options{Timeout: 2 * time.Minute, Memory: dev})
}
