package hiercomm

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/nexar"
)

// TestBatchThroughWorld runs the batch suite through Worlds over what
// Init builds on GPU nodes (the fake library): one node, where the World
// hands each batch to the nccl.Comm whole (one NCCL group), and 2×2,
// where the hierarchy runs it call by call.
func TestBatchThroughWorld(t *testing.T) {
	for _, layout := range [][]int{{3}, {2, 2}} {
		t.Run(fmt.Sprint(layout), func(t *testing.T) {
			comms, dev := gpuWiring(t, layout)
			worlds := make([]comm.Communicator, len(comms))
			for r, c := range comms {
				worlds[r] = &World{Communicator: c, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			}
			commtest.RunBatch(t, worlds, commtest.Options{Timeout: time.Minute, Memory: dev})
		})
	}
}

// native is a communicator that runs batches natively, noting the
// batches it was given.
type native struct {
	comm.Communicator
	batches [][]comm.Call
	marked  []bool // whether each batch's context carried its fingerprint
}

func (n *native) StartBatch(ctx context.Context, calls []comm.Call) *comm.Work {
	n.batches = append(n.batches, calls)
	n.marked = append(n.marked, comm.BatchOf(ctx) != 0)
	return comm.StartEach(ctx, n.Communicator, calls)
}

// TestWorldHandsBatchesOn: a World hands a whole batch to a communicator
// that runs batches natively (comm.BatchStarter), with the fingerprint
// in the context, and runs it call by call through its own Start on one
// that does not.
func TestWorldHandsBatchesOn(t *testing.T) {
	cs, err := nexar.NewMemoryWorld(1, nexar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nexar.CloseAll(cs)
	x := []float32{1, 2}
	var b comm.Batch
	b.AllReduce(comm.Host(x), comm.Host(x), comm.Sum)
	b.Send(comm.Host(x), 0, 3)
	b.Recv(comm.Host(make([]float32, 2)), 0, 3)
	n := &native{Communicator: cs[0]}
	w := &World{Communicator: n, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := b.Run(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	if len(n.batches) != 1 || len(n.batches[0]) != 3 || !n.marked[0] {
		t.Fatalf("the communicator was given batches %v (fingerprinted: %v); want the one batch of 3 calls, fingerprinted", n.batches, n.marked)
	}
	plain := &World{Communicator: cs[0], log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := b.Run(context.Background(), plain); err != nil {
		t.Fatalf("a batch through a World over a communicator that runs it call by call: %v", err)
	}
}
