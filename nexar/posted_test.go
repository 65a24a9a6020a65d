package nexar

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar/transport"
	"github.com/hiercomm/hiercomm/nexar/transport/mem"
	"github.com/hiercomm/hiercomm/nexar/transport/netmesh"
)

// startRecv posts a Recv of n int32s from peer with tag on c.
func startRecv(ctx context.Context, c *Comm, buf []int32, peer, tag int) *comm.Work {
	return c.Start(ctx, comm.Call{Kind: comm.KindRecv, Recv: comm.Host(buf), Peer: peer, Tag: tag})
}

func startSend(ctx context.Context, c *Comm, buf []int32, peer, tag int) *comm.Work {
	return c.Start(ctx, comm.Call{Kind: comm.KindSend, Send: comm.Host(buf), Peer: peer, Tag: tag})
}

// waitWithin waits for w, failing the test if it is not done within d.
func waitWithin(t *testing.T, w *comm.Work, d time.Duration) error {
	t.Helper()
	select {
	case <-w.Done():
		return w.Wait()
	case <-time.After(d):
		t.Fatalf("the operation did not end within %v", d)
		return nil
	}
}

// postedCount is the number of Recvs posted on c.
func postedCount(c *Comm) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.posted)
}

// Messages of one frame received with Start are posted: they complete
// without a goroutine of their own, in the order of their numbers whatever
// the order of the Recvs and the arrivals, and a message that came first
// is taken at once.
func TestPostedRecvs(t *testing.T) {
	cs := memWorld(t, 2, Options{})
	ctx := context.Background()
	const n = 5
	bufs := make([][]int32, n)
	works := make([]*comm.Work, n)
	// Three Recvs posted before anything is sent, on tag 7; one on tag 8.
	for i := range 3 {
		bufs[i] = make([]int32, 4)
		works[i] = startRecv(ctx, cs[1], bufs[i], 0, 7)
	}
	other := make([]int32, 2)
	otherWork := startRecv(ctx, cs[1], other, 0, 8)
	if got := postedCount(cs[1]); got != 4 {
		t.Fatalf("%d Recvs posted, want 4", got)
	}
	for i := range n {
		msg := []int32{int32(10 * i), int32(10*i + 1), int32(10*i + 2), int32(10*i + 3)}
		if err := waitWithin(t, startSend(ctx, cs[0], msg, 1, 7), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitWithin(t, startSend(ctx, cs[0], []int32{-1, -2}, 1, 8), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Messages 3 and 4 came before their Recvs: taken at once.
	for i := 3; i < n; i++ {
		bufs[i] = make([]int32, 4)
		works[i] = startRecv(ctx, cs[1], bufs[i], 0, 7)
		if done, err := works[i].Test(); !done || err != nil {
			t.Fatalf("Recv %d of a message that had come: done %v, err %v; want done at once", i, done, err)
		}
	}
	for i, w := range works {
		if err := waitWithin(t, w, 10*time.Second); err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
		if want := []int32{int32(10 * i), int32(10*i + 1), int32(10*i + 2), int32(10*i + 3)}; !slices.Equal(bufs[i], want) {
			t.Errorf("Recv %d got %v, want %v", i, bufs[i], want)
		}
	}
	if err := waitWithin(t, otherWork, 10*time.Second); err != nil || !slices.Equal(other, []int32{-1, -2}) {
		t.Errorf("Recv on tag 8: %v, %v; want [-1 -2]", other, err)
	}
	if got := postedCount(cs[1]); got != 0 {
		t.Errorf("%d Recvs still posted after all completed", got)
	}
}

// A posted Recv and a Send to this rank itself.
func TestPostedRecvFromItself(t *testing.T) {
	cs := memWorld(t, 2, Options{})
	ctx := context.Background()
	got := make([]int32, 3)
	w := startRecv(ctx, cs[0], got, 0, 1)
	if err := waitWithin(t, startSend(ctx, cs[0], []int32{4, 5, 6}, 0, 1), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := waitWithin(t, w, 10*time.Second); err != nil || !slices.Equal(got, []int32{4, 5, 6}) {
		t.Fatalf("got %v, %v; want [4 5 6]", got, err)
	}
}

// A posted Recv whose message does not fit fails with ErrMismatch, and the
// message after it is still received.
func TestPostedRecvMismatch(t *testing.T) {
	cs := memWorld(t, 2, Options{})
	ctx := context.Background()
	small := make([]int32, 2)
	w := startRecv(ctx, cs[1], small, 0, 0)
	if err := waitWithin(t, startSend(ctx, cs[0], []int32{1, 2, 3}, 1, 0), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := waitWithin(t, w, 10*time.Second); !errors.Is(err, comm.ErrMismatch) {
		t.Fatalf("Recv of 2 for a message of 3: %v, want ErrMismatch", err)
	}
	next := make([]int32, 2)
	w = startRecv(ctx, cs[1], next, 0, 0)
	if err := waitWithin(t, startSend(ctx, cs[0], []int32{8, 9}, 1, 0), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := waitWithin(t, w, 10*time.Second); err != nil || !slices.Equal(next, []int32{8, 9}) {
		t.Fatalf("the next message: %v, %v; want [8 9]", next, err)
	}
}

// Every way a posted Recv can end without its frame ends it, with the
// error that says why, and leaves nothing posted.
func TestPostedRecvEnds(t *testing.T) {
	buf := make([]int32, 2)
	t.Run("timeout", func(t *testing.T) {
		cs := memWorld(t, 2, Options{Timeout: 300 * time.Millisecond})
		err := waitWithin(t, startRecv(context.Background(), cs[1], buf, 0, 0), 10*time.Second)
		if !errors.Is(err, comm.ErrTimeout) {
			t.Fatalf("got %v, want ErrTimeout", err)
		}
		if got := postedCount(cs[1]); got != 0 {
			t.Errorf("%d Recvs still posted", got)
		}
	})
	t.Run("context", func(t *testing.T) {
		cs := memWorld(t, 2, Options{})
		ctx, cancel := context.WithCancel(context.Background())
		w := startRecv(ctx, cs[1], buf, 0, 0)
		cancel()
		if err := waitWithin(t, w, 10*time.Second); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
		// A context that ended before the Recv started.
		if err := waitWithin(t, startRecv(ctx, cs[1], buf, 0, 0), 10*time.Second); !errors.Is(err, context.Canceled) {
			t.Fatalf("with a context already done: %v, want context.Canceled", err)
		}
		if got := postedCount(cs[1]); got != 0 {
			t.Errorf("%d Recvs still posted", got)
		}
	})
	t.Run("close", func(t *testing.T) {
		cs := memWorld(t, 2, Options{})
		w := startRecv(context.Background(), cs[1], buf, 0, 0)
		cs[1].Close()
		if err := waitWithin(t, w, 10*time.Second); !errors.Is(err, comm.ErrClosed) {
			t.Fatalf("got %v, want ErrClosed", err)
		}
		if err := waitWithin(t, startRecv(context.Background(), cs[1], buf, 0, 0), 10*time.Second); !errors.Is(err, comm.ErrClosed) {
			t.Fatalf("after Close: %v, want ErrClosed", err)
		}
	})
	t.Run("peer dies", func(t *testing.T) {
		// The death aborts the communicator: the Recv from the dead rank
		// and those from live ones (whose Sends the abort refuses) end,
		// posted or blocking, each blaming the dead rank.
		cs := memWorld(t, 3, Options{})
		fromDead := startRecv(context.Background(), cs[1], buf, 2, 0)
		fromLive := startRecv(context.Background(), cs[1], buf, 0, 0)
		blocking := make(chan error, 1)
		go func() { blocking <- cs[1].Recv(context.Background(), comm.Host(make([]int32, 2)), 0, 1) }()
		time.Sleep(50 * time.Millisecond) // the blocking Recv waits
		cs[2].w.tr.(*mem.Transport).Kill()
		for name, w := range map[string]*comm.Work{"posted, from the dead rank": fromDead, "posted, from a live rank": fromLive} {
			err := waitWithin(t, w, 10*time.Second)
			if b, ok := comm.CulpritOf(err); !ok || b.Rank != 2 {
				t.Errorf("Recv %s: %v, want rank 2 blamed", name, err)
			}
		}
		select {
		case err := <-blocking:
			if b, ok := comm.CulpritOf(err); !ok || b.Rank != 2 {
				t.Errorf("blocking Recv from a live rank: %v, want rank 2 blamed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a blocking Recv from a live rank did not end when the communicator was aborted")
		}
		if got := postedCount(cs[1]); got != 0 {
			t.Errorf("%d Recvs still posted", got)
		}
	})
	t.Run("peer closes", func(t *testing.T) {
		// A clean close aborts nothing: only a Recv from the rank that
		// closed ends.
		cs := memWorld(t, 3, Options{})
		fromClosed := startRecv(context.Background(), cs[1], buf, 0, 0)
		fromLive := startRecv(context.Background(), cs[1], buf, 2, 0)
		cs[0].Close()
		if err := waitWithin(t, fromClosed, 10*time.Second); !errors.Is(err, transport.ErrPeerClosed) {
			t.Errorf("Recv from the rank that closed: %v, want ErrPeerClosed", err)
		}
		if err := waitWithin(t, startSend(context.Background(), cs[2], []int32{5, 6}, 1, 0), 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := waitWithin(t, fromLive, 10*time.Second); err != nil {
			t.Errorf("Recv from a live rank: %v", err)
		}
	})
	t.Run("peer closes its side", func(t *testing.T) {
		cs := memWorld(t, 2, Options{})
		kids := make([]comm.Communicator, 2)
		errs := onEveryRank(cs, func(r int, c *Comm) error {
			k, err := c.Split(context.Background(), 0, r)
			kids[r] = k
			return err
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		w := kids[1].Start(context.Background(), comm.Call{Kind: comm.KindRecv, Recv: comm.Host(buf), Peer: 0})
		kids[0].Close()
		err := waitWithin(t, w, 10*time.Second)
		if err == nil || !errors.Is(err, errCommClosed) {
			t.Fatalf("got %v, want rank 0's close", err)
		}
		// Posted after the close: it has ended when Start returns, not at
		// the watcher's next look (a second, or Timeout).
		done, err := kids[1].Start(context.Background(), comm.Call{Kind: comm.KindRecv, Recv: comm.Host(buf), Peer: 0}).Test()
		if !done || !errors.Is(err, errCommClosed) {
			t.Fatalf("a Recv posted after the close: done %v, %v; want ended with rank 0's close", done, err)
		}
		kids[1].Close()
	})
}

// The watcher of the posted Recvs leaves once none is posted.
func TestPostedWatcherLeaves(t *testing.T) {
	cs := memWorld(t, 2, Options{})
	ctx := context.Background()
	got := make([]int32, 1)
	w := startRecv(ctx, cs[1], got, 0, 0)
	if err := waitWithin(t, startSend(ctx, cs[0], []int32{1}, 1, 0), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := waitWithin(t, w, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(postedLinger + 5*time.Second)
	for {
		cs[1].mu.Lock()
		watching := cs[1].watching
		cs[1].mu.Unlock()
		if !watching {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watcher still runs %v after the last Recv", postedLinger+5*time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A Send of one frame started while its connection is busy with another
// frame does not wait for it: it goes on a goroutine, and arrives. (That
// the TCP transport's SendNow sends nothing on a busy link is
// TestSendNowOnABusyLink, in nexar/transport/netmesh.)
func TestStartSendOnABusyLink(t *testing.T) {
	free := make(chan struct{})
	cs := busyWorld(t, free)
	w := startSend(context.Background(), cs[0], []int32{42}, 1, 0)
	if done, _ := w.Test(); done {
		t.Fatal("a Send on a busy link completed while the link was busy")
	}
	close(free)
	if err := waitWithin(t, w, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	got := make([]int32, 1)
	if err := cs[1].Recv(context.Background(), comm.Host(got), 0, 0); err != nil || got[0] != 42 {
		t.Fatalf("got %v, %v; want [42]", got, err)
	}
}

// busyWorld is a world of two ranks over plain TCP whose rank 0 finds
// every connection busy with another frame until free closes: its
// transport's SendNow sends nothing and its Send waits meanwhile. It is
// closed when t ends.
func busyWorld(t *testing.T, free <-chan struct{}) []*Comm {
	t.Helper()
	cfgs, err := netmesh.LocalConfigs("tcp", 2, NetConfig{JobKey: []byte("hiercomm-busy-link-test-job-key!"), JobID: "busy-link"})
	if err != nil {
		t.Fatal(err)
	}
	cs := make([]*Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range cs {
		wg.Go(func() {
			cs[r], errs[r] = NewWorld(r, 2, Options{}, func(h transport.Handler) (transport.Transport, error) {
				tr, err := netmesh.NewTCP(context.Background(), cfgs[r], h)
				if err != nil || r != 0 {
					return tr, err
				}
				return &busyLinks{Transport: tr, free: free}, nil
			})
		})
	}
	wg.Wait()
	t.Cleanup(func() { CloseAll(cs) })
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return cs
}

// busyLinks is a transport whose connections are all busy with another
// frame until free closes.
type busyLinks struct {
	transport.Transport
	free <-chan struct{}
}

func (b *busyLinks) Send(ctx context.Context, peer int, h transport.Header, payload []byte) error {
	select {
	case <-b.free:
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.Transport.Send(ctx, peer, h, payload)
}

func (b *busyLinks) SendNow(peer int, h transport.Header, payload []byte) (bool, error) {
	select {
	case <-b.free:
		return b.Transport.(transport.NowSender).SendNow(peer, h, payload)
	default:
		return false, nil
	}
}

// TestRecvsLandInTheCallersBuffer: over plain TCP, whose pumps read large
// pieces straight into a waiting receive's memory (landing.go), blocking
// and posted Recvs of sizes on both sides of landMin get every element,
// a Recv whose message does not fit fails with ErrMismatch and leaves its
// buffer as it was, and no landing is left behind.
func TestRecvsLandInTheCallersBuffer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := NewLocalWorld(ctx, 2, "tcp", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer CloseAll(cs)
	msg := func(n, salt int) []int32 {
		b := make([]int32, n)
		for i := range b {
			b[i] = int32(i*31 + salt)
		}
		return b
	}
	sizes := []int{landMin/4 - 1, landMin / 4, 64 << 10 / 4, 1<<20/4 + 3}
	for i, n := range sizes {
		for _, posted := range []bool{false, true} {
			if posted && n*4 > cs[1].opt.SegmentBytes {
				continue // a Recv is posted only for a message of one frame
			}
			got := make([]int32, n)
			var w *comm.Work
			if posted {
				w = startRecv(ctx, cs[1], got, 0, i)
			} else { // a blocking Recv (Run), on a goroutine
				w = comm.NewWork()
				go func() {
					w.Complete(cs[1].Run(ctx, comm.Call{Kind: comm.KindRecv, Recv: comm.Host(got), Peer: 0, Tag: i}))
				}()
			}
			if err := waitWithin(t, startSend(ctx, cs[0], msg(n, i), 1, i), 20*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := waitWithin(t, w, 20*time.Second); err != nil {
				t.Fatalf("Recv of %d int32s (posted %v): %v", n, posted, err)
			}
			if !slices.Equal(got, msg(n, i)) {
				t.Errorf("Recv of %d int32s (posted %v): wrong elements", n, posted)
			}
		}
	}
	// A message one element longer than the Recv: no landing, a mismatch.
	n := 64 << 10 / 4
	buf := slices.Repeat([]int32{-7}, n)
	w := startRecv(ctx, cs[1], buf, 0, 99)
	if err := waitWithin(t, startSend(ctx, cs[0], msg(n+1, 5), 1, 99), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := waitWithin(t, w, 20*time.Second); !errors.Is(err, comm.ErrMismatch) {
		t.Fatalf("Recv of %d for a message of %d: %v, want ErrMismatch", n, n+1, err)
	}
	if !slices.Equal(buf, slices.Repeat([]int32{-7}, n)) {
		t.Error("a Recv that refused its message had its buffer written")
	}
	for r, c := range cs {
		c.mu.Lock()
		if len(c.landings) != 0 {
			t.Errorf("rank %d: %d landings left", r, len(c.landings))
		}
		c.mu.Unlock()
	}
}
