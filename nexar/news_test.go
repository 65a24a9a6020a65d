package nexar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// One rank alone learns that world rank 3 failed (its membership detector
// said so; rank 3's process hangs, so nobody else sees anything). Ranks 0
// and 1 wait on rank 3 in a Split child that the observer, rank 2, is not
// a member of: the failure news reaches them over the world's links, and
// their child's collective fails naming the child's rank of world rank 3,
// and what happened, long before any deadline. Their world communicator is
// aborted by it too, and a call on it names rank 3.
func TestFailureNewsReachesEveryCommunicatorOfTheWorld(t *testing.T) {
	cs := memWorld(t, 4, Options{Timeout: 2 * time.Minute})
	color := []int{0, 0, 1, 0} // rank 2 is not in the child of 0, 1 and 3
	children := make([]comm.Communicator, len(cs))
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		var err error
		children[r], err = c.Split(context.Background(), color[r], -r) // keys reverse the ranks: world 3 is child 0
		return err
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, ch := range children {
			ch.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs = onEveryRank(cs, func(r int, c *Comm) error {
		switch r {
		case 2:
			time.Sleep(50 * time.Millisecond) // the others are waiting by now
			c.PeerFailed(3, errors.New("the membership detector declared it dead"))
			return nil
		case 3:
			return nil // a hung process: it takes part in nothing
		}
		x := make([]float32, 1<<10)
		err := children[r].AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum)
		if err := blames(err, 0, "rank 0 "); err != nil {
			return fmt.Errorf("the child's AllReduce: %w", err)
		}
		// Heard as news ("rank 0 (world rank 3, …) failed: … (seen by
		// world rank 2…"), from the child's other waiting rank, which
		// heard the news first ("rank 0 failed: … (told by rank 1)"), or
		// from rank 3 itself, which the observer told too ("rank 0
		// failed: its peers have expelled it …: … saw it fail: …").
		if !strings.Contains(err.Error(), "the membership detector declared it dead") {
			return fmt.Errorf("the child's AllReduce: %q does not say what happened", err)
		}
		if err := blames(c.Barrier(ctx), 3, "rank 3 "); err != nil {
			return fmt.Errorf("the world's Barrier: %w", err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// Only what a rank saw itself, or heard with the observer named, is
// news: a clean close is not, nor a failure this rank blames on itself
// (stalled, expelled). What is news reaches every other rank, naming the
// observer; a rank the observer does not tell (it holds rank 1 and 2 for
// gone) hears it from the rank that passes it on.
func TestFailureNewsIsOnlyWhatWasSeen(t *testing.T) {
	cs := memWorld(t, 5, Options{Timeout: time.Minute})
	w := cs[0].w
	w.PeerFailed(1, &comm.PeerError{Peer: 1, Err: transport.ErrPeerClosed})
	w.PeerFailed(2, &comm.PeerError{Peer: 0, Addr: "this rank", Err: &transport.ExpelledError{Peer: 2, Cause: errors.New("closed")}})
	w.PeerFailed(3, &comm.PeerError{Peer: 3, Err: errors.New("its connection was reset")})
	for _, r := range []int{1, 2, 4} {
		deadline := time.Now().Add(20 * time.Second)
		for {
			_, err := cs[r].w.peerState(3)
			if err != nil {
				if want := "rank 3 (memory:3) failed: its connection was reset (seen by world rank 0"; !strings.Contains(err.Error(), want) ||
					r != 4 && !strings.Contains(err.Error(), ", told by world rank ") {
					t.Errorf("rank %d: the news reads %q", r, err)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rank %d never heard that rank 3 failed", r)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if _, err := cs[4].w.peerState(2); err != nil {
		t.Errorf("rank 4 heard of rank 2's failure, which rank 0 blamed on itself: %v", err)
	}
	if _, err := cs[4].w.peerState(1); err != nil {
		t.Errorf("rank 4 heard of rank 1's clean close as a failure: %v", err)
	}
}

// The observer tells the failed rank too: one that still runs (in
// memory nothing cuts its links) learns from the news that it was given
// up, names itself, and says what the observer saw.
func TestFailureNewsTellsTheRankItNames(t *testing.T) {
	cs := memWorld(t, 3, Options{Timeout: time.Minute})
	cs[0].PeerFailed(2, errors.New("the membership detector declared it dead"))
	for deadline := time.Now().Add(20 * time.Second); cs[2].AbortCause() == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("rank 2 never learned that it was given up")
		}
	}
	err := cs[2].Barrier(context.Background())
	if berr := blames(err, 2, "rank 2 (this rank) failed: its peers have expelled it"); berr != nil || !errors.Is(err, transport.ErrExpelled) ||
		!strings.Contains(err.Error(), "world rank 0 saw it fail: the membership detector declared it dead") {
		t.Errorf("rank 2: %v (want ErrExpelled, naming itself and what rank 0 saw): %v", err, berr)
	}
}

// A detector on rank 0 takes rank 2 for dead while it runs (a false
// suspicion, a cut link): rank 1 hears the news and gives rank 2 up too,
// and rank 2, whose connections its peers cut, learns that it was
// expelled (ErrExpelled, naming itself) instead of blaming the live rank
// that cut them, and tells nobody that rank 0 or 1 failed.
func TestExpelledRankBlamesItself(t *testing.T) {
	for _, network := range []string{"quic", "tcp"} {
		t.Run(network, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cs, err := NewLocalWorld(ctx, 3, network, Options{Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer CloseAll(cs)
			cs[0].PeerFailed(2, errors.New("the membership detector declared it dead"))
			errs := onEveryRank(cs, func(r int, c *Comm) error {
				err := c.Barrier(ctx)
				if err := blames(err, 2, "rank 2 "); err != nil {
					return err
				}
				if self := r == 2; errors.Is(err, transport.ErrExpelled) != self {
					return fmt.Errorf("%v: ErrExpelled = %v, want %v", err, !self, self)
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			for _, r := range []int{0, 1} {
				if _, err := cs[r].w.peerState(1 - r); err != nil {
					t.Errorf("rank %d holds rank %d for failed: %v", r, 1-r, err)
				}
			}
		})
	}
}

// A send that finds a peer's connection broken is this rank's own
// sighting of the failure: the news is out before the send's error
// reaches the caller, so a caller that closes at once (a trainer that
// exits on the error) still tells every rank what it saw. Before, the
// transport's report of a broken write came later on another goroutine,
// and a rank waiting on the closer blamed its close instead of the dead
// rank (TestKilledRankIsReportedByEverySurvivor, once in CI).
func TestBrokenSendIsNewsBeforeTheCallerCanClose(t *testing.T) {
	cs := memWorld(t, 3, Options{Timeout: time.Minute})
	w := cs[0].w
	if err := w.sendError(1, &comm.PeerError{Peer: 1, Err: transport.ErrPeerClosed}); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("a clean close: %v", err)
	}
	if _, err := w.peerState(1); err != nil {
		t.Fatalf("a close seen on one send is not yet the end of the peer (other connections may carry frames): %v", err)
	}
	err := w.sendError(1, &comm.PeerError{Peer: 1, Addr: "memory:1", Err: errors.New("its connection was reset")})
	if !strings.Contains(err.Error(), "its connection was reset") {
		t.Fatalf("the send's error: %v", err)
	}
	if cs[0].AbortCause() == nil {
		t.Error("the world communicator was not aborted by its own sighting")
	}
	cs[0].Close() // at once, as a trainer exits on the error
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := cs[2].w.peerState(1)
		if err != nil {
			if want := "rank 1 (memory:1) failed: its connection was reset (seen by world rank 0"; !strings.Contains(err.Error(), want) {
				t.Errorf("rank 2 heard %q, want %q", err, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("rank 2 never heard that rank 1 failed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A rank that sees a failure itself tells the world before any call of
// its own fails on it: a call the failure aborts returns, its caller
// closes at once, and the news still reaches every rank. (Before, the
// news went out after the aborts, and a Close that came between shut
// the sends that had not started.) Rank 0 waits in an AllReduce when its
// transport reports rank 1 failed; the others take no part.
func TestFailureNewsGoesOutBeforeTheAbortedCallReturns(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := range 20 {
		cs := memWorld(t, 4, Options{Timeout: time.Minute, Logger: quiet})
		done := make(chan error, 1)
		go func() {
			x := make([]float32, 8)
			err := cs[0].AllReduce(context.Background(), comm.Host(x), comm.Host(x), comm.Sum)
			cs[0].Close() // at once, as a trainer exits on the error
			done <- err
		}()
		time.Sleep(time.Millisecond)
		cs[0].w.PeerFailed(1, &comm.PeerError{Peer: 1, Addr: "memory:1", Err: errors.New("its connection was reset")})
		if err := <-done; blames(err, 1, "rank 1 ") != nil {
			t.Fatalf("round %d: rank 0's AllReduce: %v", i, err)
		}
		for _, r := range []int{2, 3} {
			deadline := time.Now().Add(20 * time.Second)
			for {
				_, err := cs[r].w.peerState(1)
				if err != nil {
					if want := "its connection was reset (seen by world rank 0"; !strings.Contains(err.Error(), want) {
						t.Fatalf("round %d: rank %d heard %q, want %q", i, r, err, want)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("round %d: rank %d never heard that rank 1 failed", i, r)
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
}

// slowWarnings delays every warning, as a logger writing to a slow
// terminal or pipe does: the time between a failure becoming visible and
// the communicators being aborted for it grows.
type slowWarnings struct{ slog.Handler }

func (h slowWarnings) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		time.Sleep(20 * time.Millisecond)
	}
	return h.Handler.Handle(ctx, r)
}

// Two peers tell rank 0 that rank 1 failed, at once, and one of them then
// closes (its caller exits on the failure), as survivors do when a rank is
// killed. The second account must not let rank 0 go on to the close while
// the first is still aborting rank 0's communicators: a collective waiting
// on the closed peer then fails on its close, naming a rank that did
// nothing wrong, instead of on rank 1's failure.
func TestSecondNewsOfAFailureWaitsUntilTheFirstIsActedOn(t *testing.T) {
	slow := slog.New(slowWarnings{slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})})
	for i := range 5 {
		cs := memWorld(t, 4, Options{Timeout: time.Minute, Logger: slow})
		done := waitOnRankTwo(cs)
		w := cs[0].w
		failed := func(observer int) *comm.PeerError {
			return &comm.PeerError{Peer: 1, Addr: "memory:1", Err: fmt.Errorf("its connection was reset (seen by world rank %d)", observer)}
		}
		go w.PeerFailed(1, failed(2))
		time.Sleep(2 * time.Millisecond) // the first account is being acted on
		w.PeerFailed(1, failed(3))
		for _, p := range []int{2, 3} {
			w.PeerFailed(p, &comm.PeerError{Peer: p, Addr: fmt.Sprintf("memory:%d", p), Err: transport.ErrPeerClosed})
		}
		if err := <-done[0]; blames(err, 1, "rank 1 ") != nil {
			t.Fatalf("round %d: rank 0's AllReduce: %v", i, blames(err, 1, "rank 1 "))
		}
		if err := <-done[1]; err == nil {
			t.Fatalf("round %d: rank 1's AllReduce succeeded without its peers", i)
		}
	}
}

// A peer closes cleanly in the middle of a collective, and the news of
// the failure it closed for comes just after its goodbye (on another link
// or lane): the collective names the failure, not the blameless close,
// both when the close ends its wait for the peer and when the close is
// known before it sends to the peer (CI: a survivor's AllReduce blamed
// rank 0's close, though rank 0 had told it of rank 1's death).
func TestCloseBeforeItsNewsNamesTheFailure(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	closed := &comm.PeerError{Peer: 2, Addr: "memory:2", Err: transport.ErrPeerClosed}
	for _, closeFirst := range []bool{false, true} {
		for i := range 5 {
			cs := memWorld(t, 4, Options{Timeout: time.Minute, Logger: quiet})
			w := cs[0].w
			if closeFirst {
				w.PeerFailed(2, closed)
			}
			done := waitOnRankTwo(cs)
			if !closeFirst {
				w.PeerFailed(2, closed)
			}
			time.Sleep(20 * time.Millisecond)
			w.PeerFailed(3, &comm.PeerError{Peer: 3, Addr: "memory:3", Err: errors.New("its connection was reset (seen by world rank 2)")})
			if err := <-done[0]; blames(err, 3, "rank 3 ") != nil {
				t.Fatalf("close first %v, round %d: rank 0's AllReduce: %v", closeFirst, i, blames(err, 3, "rank 3 "))
			}
			if err := <-done[1]; err == nil {
				t.Fatalf("close first %v, round %d: rank 1's AllReduce succeeded without its peers", closeFirst, i)
			}
		}
	}
}

// waitOnRankTwo starts an AllReduce of 8 floats on ranks 0 and 1 of a
// world of 4 and returns their results' channels: rank 0's exchange with
// rank 1 is done, and it waits on rank 2 from then on.
func waitOnRankTwo(cs []*Comm) [2]chan error {
	done := [2]chan error{make(chan error, 1), make(chan error, 1)}
	for r := range done {
		go func() {
			x := make([]float32, 8)
			done[r] <- cs[r].AllReduce(context.Background(), comm.Host(x), comm.Host(x), comm.Sum)
		}()
	}
	time.Sleep(time.Millisecond)
	return done
}
