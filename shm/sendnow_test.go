package shm

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// engineRuns reports whether c's point-to-point engine goroutine runs.
func engineRuns(c *Comm) bool {
	c.p2p.mu.Lock()
	defer c.p2p.mu.Unlock()
	return c.p2p.running
}

// A small Send with nothing queued before it is written into the ring on
// the caller's goroutine: its Work is done at once, no engine runs for it.
// A Send behind a queued one waits its turn, so messages keep their order.
func TestSendNow(t *testing.T) {
	cs := localWorld(t, 2, Config{SlotBytes: minSlotBytes})
	ctx := context.Background()

	w := cs[0].Start(ctx, comm.Call{Kind: comm.KindSend, Send: comm.Host([]int32{7, 8, 9}), Peer: 1, Tag: 3})
	if done, err := w.Test(); !done || err != nil {
		t.Fatalf("a 12-byte Send: done %v, err %v; want done at once", done, err)
	}
	if engineRuns(cs[0]) {
		t.Error("the engine runs for a Send written at once")
	}
	got := make([]int32, 3)
	if err := cs[1].Recv(ctx, comm.Host(got), 0, 3); err != nil || !slices.Equal(got, []int32{7, 8, 9}) {
		t.Fatalf("got %v, %v; want [7 8 9]", got, err)
	}

	// A message larger than the 4 KiB ring is queued; the small one after
	// it, with the same tag, must not overtake it.
	big := make([]int64, 1<<14)
	for i := range big {
		big[i] = int64(i)
	}
	first := cs[0].Start(ctx, comm.Call{Kind: comm.KindSend, Send: comm.Host(big), Peer: 1, Tag: 4})
	second := cs[0].Start(ctx, comm.Call{Kind: comm.KindSend, Send: comm.Host([]int64{-1}), Peer: 1, Tag: 4})
	if done, _ := second.Test(); done {
		t.Fatal("a Send behind a queued one was done before it")
	}
	in := make([]int64, len(big))
	if err := cs[1].Recv(ctx, comm.Host(in), 0, 4); err != nil || !slices.Equal(in, big) {
		t.Fatalf("the first message: %v (equal %v)", err, slices.Equal(in, big))
	}
	one := make([]int64, 1)
	if err := cs[1].Recv(ctx, comm.Host(one), 0, 4); err != nil || one[0] != -1 {
		t.Fatalf("the second message: %v, %v; want [-1]", one, err)
	}
	if err := first.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Fatal(err)
	}

	// A context that ended fails the Send without writing it.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := cs[0].Start(done, comm.Call{Kind: comm.KindSend, Send: comm.Host([]int32{1}), Peer: 1}).Wait(); err == nil {
		t.Fatal("a Send with a context that ended succeeded")
	}
}

// A Recv whose message is already whole in the ring is done as it
// starts, with no engine; messages of one sender and tag are still taken
// in order, and one that does not fit fails the Recv with a mismatch.
func TestRecvNow(t *testing.T) {
	cs := localWorld(t, 2, Config{SlotBytes: minSlotBytes})
	ctx := context.Background()
	for i := range 3 {
		if err := cs[0].Send(ctx, comm.Host([]int32{int32(i), -int32(i)}), 1, 5); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		got := make([]int32, 2)
		w := cs[1].Start(ctx, comm.Call{Kind: comm.KindRecv, Recv: comm.Host(got), Peer: 0, Tag: 5})
		if done, err := w.Test(); !done || err != nil {
			t.Fatalf("message %d: done %v, err %v; want done as it starts", i, done, err)
		}
		if !slices.Equal(got, []int32{int32(i), -int32(i)}) {
			t.Fatalf("message %d: got %v", i, got)
		}
	}
	if engineRuns(cs[1]) {
		t.Error("the engine runs for Recvs of messages that were here")
	}

	if err := cs[0].Send(ctx, comm.Host([]int64{1, 2, 3}), 1, 6); err != nil {
		t.Fatal(err)
	}
	err := cs[1].Start(ctx, comm.Call{Kind: comm.KindRecv, Recv: comm.Host(make([]int64, 2)), Peer: 0, Tag: 6}).Wait()
	if !errors.Is(err, comm.ErrMismatch) || comm.PeerOf(err) != 0 {
		t.Fatalf("a Recv of 2 int64 given 3: %v; want a mismatch naming rank 0", err)
	}
	// The refused message is gone: the next one with the tag is next.
	if err := cs[0].Send(ctx, comm.Host([]int64{4, 5}), 1, 6); err != nil {
		t.Fatal(err)
	}
	two := make([]int64, 2)
	if err := cs[1].Recv(ctx, comm.Host(two), 0, 6); err != nil || !slices.Equal(two, []int64{4, 5}) {
		t.Fatalf("after the refused one: %v, %v; want [4 5]", two, err)
	}
}

// A Recv whose context ends while its message is arriving hands the
// message on to the next Recv of the same sender and tag already waiting,
// not to a later one: messages keep their order.
func TestExpiredRecvHandsItsMessageOn(t *testing.T) {
	cs := localWorld(t, 2, Config{})
	e := cs[1].p2p
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	recv := func(ctx context.Context) *recvOp {
		return &recvOp{b: cs[1].boundFor(ctx), work: comm.NewWork(), peer: 0, tag: 7, dtype: comm.U8, count: 8, buf: make([]byte, 8)}
	}
	first, second := recv(ended), recv(context.Background())
	m := &message{src: 0, tag: 7, dtype: comm.U8, count: 8, size: 8, data: first.buf, got: 3, recv: first}
	first.msg = m
	copy(first.buf, []byte{1, 2, 3})
	k := p2pKey{0, 7}
	e.mu.Lock()
	e.inbound[0] = m
	e.recvs[k] = []*recvOp{second}
	e.nrecv += 2
	err := e.expireLocked(time.Now())
	owner, waiting, kept := m.recv, len(e.recvs[k]), len(e.unexpected[k])
	e.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if done, ferr := first.work.Test(); !done || ferr == nil {
		t.Errorf("the Recv whose context ended: done %v, err %v; want it failed", done, ferr)
	}
	if owner != second || waiting != 0 || kept != 0 {
		t.Fatalf("the arriving message went to %p (the waiting Recv is %p), %d Recvs still wait, %d messages kept unclaimed; want it given to the waiting Recv", owner, second, waiting, kept)
	}
	if !slices.Equal(second.buf[:3], []byte{1, 2, 3}) {
		t.Errorf("the waiting Recv holds %v of the message so far, want [1 2 3]", second.buf[:3])
	}
}

// TestP2PBounds: a Recv that nothing answers ends by the caller's deadline
// or, without one, by Config.Timeout, each with comm.ErrTimeout; the
// communicator goes on (a later message gets through). The engine keeps
// both as plain deadlines, not a context and timer per message.
func TestP2PBounds(t *testing.T) {
	cs := localWorld(t, 2, Config{Timeout: 300 * time.Millisecond})
	buf := make([]int64, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"the caller's deadline", ctx, "deadline exceeded"},
		{"Config.Timeout", context.Background(), "Config.Timeout (300ms)"},
	} {
		start := time.Now()
		err := cs[1].Recv(tc.ctx, comm.Host(buf), 0, 3)
		if !errors.Is(err, comm.ErrTimeout) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Recv = %v; want comm.ErrTimeout saying %q", tc.name, err, tc.want)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("%s: the Recv took %v to end", tc.name, took)
		}
	}
	send := cs[0].Start(context.Background(), comm.Call{Kind: comm.KindSend, Send: comm.Host([]int64{8, 9}), Peer: 1, Tag: 4})
	if err := cs[1].Recv(context.Background(), comm.Host(buf), 0, 4); err != nil || !slices.Equal(buf, []int64{8, 9}) {
		t.Fatalf("after the timed-out Recvs: %v, %v; want [8 9]", buf, err)
	}
	if err := send.Wait(); err != nil {
		t.Fatal(err)
	}
}
