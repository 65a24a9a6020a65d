package mem

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// recorder is a Handler that keeps what it is given.
type recorder struct {
	mu     sync.Mutex
	frames []string
	failed map[int]error
}

func (r *recorder) Deliver(src int, h transport.Header, p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.frames = append(r.frames, string(p))
	transport.PutBuf(p)
}

func (r *recorder) PeerFailed(peer int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed[peer] = err
}

func world(n int) ([]transport.Transport, []*recorder) {
	rs := make([]*recorder, n)
	hs := make([]transport.Handler, n)
	for i := range rs {
		rs[i] = &recorder{failed: map[int]error{}}
		hs[i] = rs[i]
	}
	return NewTransports(hs), rs
}

// A frame reaches its peer's handler as a copy; a close is reported to the
// others as ErrPeerClosed, a kill as a failure that is not, and a closed
// rank's sends fail with ErrClosed.
func TestMemoryTransport(t *testing.T) {
	trs, rs := world(3)
	ctx := context.Background()
	payload := []byte("frame")
	if err := trs[0].Send(ctx, 1, transport.Header{Kind: transport.FrameData}, payload); err != nil {
		t.Fatal(err)
	}
	payload[0] = 'X'
	if got := rs[1].frames; len(got) != 1 || got[0] != "frame" {
		t.Fatalf("rank 1 got %q, want [frame] (a copy of the payload)", got)
	}
	if sent, err := trs[0].(transport.NowSender).SendNow(2, transport.Header{Kind: transport.FrameP2P}, []byte("now")); !sent || err != nil {
		t.Fatalf("SendNow: %v, %v", sent, err)
	}
	if err := trs[0].Send(ctx, 0, transport.Header{}, nil); err == nil {
		t.Error("a send to itself succeeded")
	}

	trs[2].Close()
	if err := rs[0].failed[2]; !errors.Is(err, transport.ErrPeerClosed) {
		t.Errorf("rank 0 on rank 2's close: %v, want ErrPeerClosed", err)
	}
	if err := trs[2].Send(ctx, 0, transport.Header{}, nil); !errors.Is(err, transport.ErrClosed) || !errors.Is(err, comm.ErrClosed) {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}
	if err := trs[0].Send(ctx, 2, transport.Header{}, nil); !errors.Is(err, comm.ErrPeerFailed) {
		t.Errorf("Send to a closed rank: %v, want a peer error", err)
	}

	trs[1].(*Transport).Kill()
	if err := rs[0].failed[1]; err == nil || errors.Is(err, transport.ErrPeerClosed) {
		t.Errorf("rank 0 on rank 1's death: %v, want a failure that is not a close", err)
	}
}
