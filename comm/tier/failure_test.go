package tier

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// One test per rule of the failure machine (its doc comment lists them);
// failure_sim_test.go checks them together in a simulated world.

var (
	sigA = comm.Signature{Kind: comm.KindAllReduce, DType: comm.F32, Op: comm.Sum, Count: 8, Root: -1}
	sigB = comm.Signature{Kind: comm.KindBroadcast, DType: comm.F32, Count: 8}
)

func told(eff Effects, to int, seq uint64) (Notice, bool) {
	for _, t := range eff.Tell {
		if t.To == to && t.Notice.Seq == seq {
			return t.Notice, true
		}
	}
	return Notice{}, false
}

func ended(eff Effects, seq uint64) error {
	for _, e := range eff.End {
		if e.Seq == seq {
			return e.Err
		}
	}
	return nil
}

func TestFailureFirstFailureWinsAndIsToldOnce(t *testing.T) {
	f := Failure{Rank: 1}
	f.Start(1, sigA, nil)
	first := ContextError(context.DeadlineExceeded)
	eff := f.Fail(1, first, true)
	if !errors.Is(ended(eff, 1), comm.ErrTimeout) {
		t.Fatalf("End = %v; want the deadline", eff.End)
	}
	n, ok := told(eff, Everyone, 1)
	if !ok || n.Code != FailTimeout || n.Sig != sigA {
		t.Fatalf("Tell = %+v; want a timeout notice of #1 to every rank", eff.Tell)
	}
	if again := f.Fail(1, errors.New("later"), true); len(again.End)+len(again.Tell) != 0 || again.Aborted != nil {
		t.Fatalf("a second failure had effects: %+v", again)
	}
	_, err := f.Finish(1)
	if !errors.Is(err, comm.ErrTimeout) {
		t.Fatalf("Finish = %v; want the first failure", err)
	}
}

func TestFailureDeadlineRuleAbortsQuietly(t *testing.T) {
	f := Failure{Rank: 0}
	f.Start(1, sigA, nil)
	f.Start(2, sigB, nil) // concurrent collectives
	f.Fail(1, ContextError(context.Canceled), true)
	eff, err := f.Finish(1)
	if !errors.Is(err, comm.ErrCanceled) || eff.Aborted == nil || !errors.Is(f.AbortCause(), comm.ErrCanceled) {
		t.Fatalf("Finish = %v, aborted %v; want the cancel to abort the communicator", err, eff.Aborted)
	}
	if _, ok := told(eff, Everyone, 0); ok {
		t.Fatal("the deadline rule's abort was announced")
	}
	if !errors.Is(ended(eff, 2), comm.ErrAborted) {
		t.Fatalf("the collective in flight was not ended by the abort: %+v", eff.End)
	}
	if _, ok := told(eff, Everyone, 2); !ok {
		t.Fatal("the peers of the collective in flight were not told")
	}
	// A later abort that announces still does, once.
	later := f.Abort(errors.New("the hierarchy gave up"), true, false)
	if _, ok := told(later, Everyone, 0); !ok || later.Aborted != nil {
		t.Fatalf("a later announced abort: %+v; want it announced, the first cause kept", later)
	}
	if again := f.Abort(errors.New("again"), true, false); len(again.Tell) != 0 {
		t.Fatalf("announced twice: %+v", again.Tell)
	}
	if !errors.Is(f.AbortCause(), comm.ErrCanceled) {
		t.Fatalf("cause = %v; want the first one kept", f.AbortCause())
	}
}

func TestFailureMismatchAbortsUnannounced(t *testing.T) {
	f := Failure{Rank: 0}
	f.Start(1, sigA, nil)
	keep, eff := f.Frame(2, 1, sigB)
	var me *comm.MismatchError
	if keep || !errors.As(ended(eff, 1), &me) || me.Peer != 2 || me.Local != sigA || me.Remote != sigB {
		t.Fatalf("Frame: keep %v, End %+v; want #1 ended with the mismatch against rank 2", keep, eff.End)
	}
	if eff.Aborted == nil || !errors.Is(f.AbortCause(), comm.ErrMismatch) {
		t.Fatal("a mismatch did not abort")
	}
	if _, ok := told(eff, Everyone, 0); ok {
		t.Fatal("a mismatch's abort was announced (its notices carry it)")
	}
	if n, ok := told(eff, Everyone, 1); !ok || n.Code != FailMismatch || n.Sig != sigA {
		t.Fatalf("the mismatch's notice = %+v; want this rank's call at #1", eff.Tell)
	}
	// The next call is refused, and told as the mismatched collective,
	// with this rank's call there.
	eff = f.Start(2, sigA, nil)
	if !errors.Is(ended(eff, 2), comm.ErrMismatch) || !errors.Is(ended(eff, 2), comm.ErrAborted) {
		t.Fatalf("the next call: %+v; want it refused with the mismatch", eff.End)
	}
	if n, ok := told(eff, Everyone, 1); !ok || n.Sig != sigA {
		t.Fatalf("the refusal's notice: %+v; want it told as #1's", eff.Tell)
	}
}

func TestFailureMismatchAfterThisRankFinished(t *testing.T) {
	f := Failure{Rank: 0}
	f.Start(1, sigA, nil)
	if _, err := f.Finish(1); err != nil {
		t.Fatal(err)
	}
	// A late frame with another call: abort, and tell its sender.
	keep, eff := f.Frame(3, 1, sigB)
	if keep || eff.Aborted == nil || !errors.Is(f.AbortCause(), comm.ErrMismatch) {
		t.Fatalf("late frame: keep %v, aborted %v", keep, eff.Aborted)
	}
	if n, ok := told(eff, 3, 1); !ok || n.Code != FailMismatch || n.Sig != sigA {
		t.Fatalf("the sender was not told this rank's call: %+v", eff.Tell)
	}

	// A peer's mismatch notice of a finished collective aborts too.
	g := Failure{Rank: 0}
	g.Start(1, sigA, nil)
	g.Finish(1)
	eff = g.Heard(2, Notice{Seq: 1, Sig: sigB, Code: FailMismatch, Culprit: -1, Reason: "rank 2 saw it"})
	if !errors.As(g.AbortCause(), new(*comm.MismatchError)) || eff.Aborted == nil {
		t.Fatalf("cause = %v; want the mismatch", g.AbortCause())
	}
	// But news of another failure after the end changes nothing.
	h := Failure{Rank: 0}
	h.Start(1, sigA, nil)
	h.Finish(1)
	if eff := h.Heard(2, Notice{Seq: 1, Code: FailTimeout, Culprit: -1}); eff.Aborted != nil || h.Aborted() != nil {
		t.Fatal("a timeout notice of a finished collective aborted")
	}
}

func TestFailureWhatCameBeforeStart(t *testing.T) {
	f := Failure{Rank: 0}
	f.Heard(1, Notice{Seq: 1, Code: FailInvalid, Culprit: -1, Reason: "bad count"})
	eff := f.Start(1, sigA, nil)
	var re *comm.RemoteError
	if !errors.As(ended(eff, 1), &re) || re.Peer != 1 || !strings.Contains(re.Reason, "bad count") {
		t.Fatalf("Start after a notice: %+v; want the peer's failure", eff.End)
	}
	if f.Aborted() != nil {
		t.Fatal("a peer's bad argument aborted")
	}

	g := Failure{Rank: 0}
	if keep, _ := g.Frame(2, 1, sigB); !keep {
		t.Fatal("a frame that came early was not kept")
	}
	eff = g.Start(1, sigA, nil)
	var me *comm.MismatchError
	if !errors.As(ended(eff, 1), &me) || me.Peer != 2 || me.Remote != sigB {
		t.Fatalf("Start after another call's frame: %+v; want the mismatch", eff.End)
	}

	// The odd call's frame after a matching one (failure_sim_test.go's
	// seed 452 found it: only the first early frame was compared).
	h := Failure{Rank: 0}
	h.Frame(1, 1, sigA)
	h.Frame(3, 1, sigB)
	h.Frame(2, 1, sigA)
	eff = h.Start(1, sigA, nil)
	if !errors.As(ended(eff, 1), &me) || me.Peer != 3 || me.Remote != sigB {
		t.Fatalf("Start after a matching and an odd early frame: %+v; want the mismatch with rank 3", eff.End)
	}
}

func TestFailureRefusedCallIsToldAndKeepsNoFrames(t *testing.T) {
	f := Failure{Rank: 0}
	bad := &comm.ArgError{Kind: comm.KindAllReduce, Arg: "count", Problem: "is negative"}
	eff := f.Start(1, sigA, bad)
	if !errors.Is(ended(eff, 1), comm.ErrInvalidArgument) {
		t.Fatalf("End = %+v", eff.End)
	}
	if n, ok := told(eff, Everyone, 1); !ok || n.Code != FailInvalid {
		t.Fatalf("Tell = %+v; want the refusal told", eff.Tell)
	}
	if keep, _ := f.Frame(1, 1, sigA); keep {
		t.Fatal("a refused collective kept a frame")
	}
	if eff, _ := f.Finish(1); eff.Aborted != nil {
		t.Fatal("a bad argument aborted the communicator")
	}
}

func TestFailureBlame(t *testing.T) {
	died := &comm.PeerError{Peer: 3, Err: errors.New("its heartbeat stopped")}
	n := NoticeOf(5, sigA, died)
	if n.Code != FailPeer || n.Culprit != 3 || n.Outside || n.Reason != "its heartbeat stopped" {
		t.Fatalf("NoticeOf = %+v; want rank 3 blamed with what happened to it", n)
	}
	if o := NoticeOf(5, sigA, FromOutside(died)); !o.Outside {
		t.Fatal("a cause from a composer is not marked Outside")
	}
	// The rank that relays the news is not the culprit.
	f := Failure{Rank: 0}
	f.Start(5, sigA, nil)
	eff := f.Heard(2, n)
	b, ok := comm.CulpritOf(ended(eff, 5))
	if !ok || b.Rank != 3 {
		t.Fatalf("blame = %+v, %v; want rank 3, not the relay 2", b, ok)
	}
	// A notice that blames this rank: its peers gave it up.
	g := Failure{Rank: 3}
	g.Start(5, sigA, nil)
	eff = g.Heard(2, n)
	if err := ended(eff, 5); err == nil || !strings.Contains(err.Error(), "its peers gave this rank up") {
		t.Fatalf("got %v; want it to say its peers gave it up", err)
	}
	stalled := errors.New("stalled")
	h := Failure{Rank: 3, GaveUp: func(int, *comm.RemoteError) error { return stalled }}
	h.Start(5, sigA, nil)
	if err := ended(h.Heard(2, n), 5); err != stalled {
		t.Fatalf("GaveUp not asked: %v", err)
	}
}

func TestFailureProbed(t *testing.T) {
	f := Failure{Rank: 0}
	f.Start(1, sigA, nil)
	if p, _ := f.Probed(1, 2, sigA); p != ProbeAhead {
		t.Fatalf("probe of a collective not started: %v", p)
	}
	if p, eff := f.Probed(1, 1, sigA); p != ProbeRunning || len(eff.End) != 0 {
		t.Fatalf("probe with the same call: %v %+v", p, eff)
	}
	if _, eff := f.Probed(1, 1, sigB); !errors.Is(ended(eff, 1), comm.ErrMismatch) {
		t.Fatalf("probe with another call: %+v; want the mismatch", eff.End)
	}
	g := Failure{Rank: 0}
	g.Start(1, sigA, nil)
	g.Finish(1)
	if _, eff := g.Probed(2, 1, sigB); eff.Tell == nil || eff.Tell[0].To != 2 || eff.Tell[0].Notice.Sig != sigA {
		t.Fatalf("probe of a finished collective with another call: %+v; want the asker told", eff.Tell)
	}
}

// ExampleFailure shows a tier's side of the failure machine: it feeds in
// what happened and carries out the Effects, here by printing them.
func ExampleFailure() {
	f := Failure{Rank: 0}
	show := func(eff Effects) {
		for _, e := range eff.End {
			fmt.Printf("end #%d: %v\n", e.Seq, e.Err)
		}
		for _, t := range eff.Tell {
			fmt.Printf("tell %d: #%d %v\n", t.To, t.Notice.Seq, t.Notice.Code)
		}
		if eff.Aborted != nil {
			fmt.Println("aborted")
		}
	}
	call := comm.Signature{Kind: comm.KindAllReduce, DType: comm.F32, Op: comm.Sum, Count: 4, Root: -1}
	show(f.Start(1, call, nil))
	// A frame of collective 1 from rank 2, which called a Broadcast.
	other := comm.Signature{Kind: comm.KindBroadcast, DType: comm.F32, Count: 4}
	_, eff := f.Frame(2, 1, other)
	show(eff)
	_, err := f.Finish(1)
	fmt.Println(errors.Is(err, comm.ErrMismatch))
	// Output:
	// end #1: mismatched collective #1: this rank called AllReduce(4×f32, sum), rank 2 called Broadcast(4×f32, root 0) (the kind, the op and the root differ); every rank must start the same collectives in the same order with the same counts, dtypes, ops and roots
	// tell -1: #1 mismatch
	// aborted
	// true
}

// A composed communicator's mismatch (its own sequence numbers) that
// aborted this one is no mismatch of this one's calls: the refusals are
// told at their own number, not rewritten as the composer's collective.
// (The hierarchy's fault suite with NCCL inside nodes met it: a node's
// control read "mismatched collective #2: this rank called
// AllGather(256×u8)", the hierarchy's #2 told as the control's.) A peer
// that reads such a notice with its own call gets the peer's report.
func TestFailureMismatchFromOutside(t *testing.T) {
	theirs := &comm.MismatchError{Peer: 3, Seq: 2, Local: sigA, Remote: sigB}
	f := Failure{Rank: 1}
	f.Abort(Inside(theirs), true, false)
	eff := f.Start(5, sigB, nil)
	n, ok := told(eff, Everyone, 5)
	if !ok || n.Sig != sigB {
		t.Fatalf("the refusal was told as %+v; want collective #5 with this rank's call", eff.Tell)
	}
	g := Failure{Rank: 0}
	g.Start(5, sigB, nil)
	err := ended(g.Heard(1, n), 5)
	var me *comm.MismatchError
	if !errors.As(err, &me) || me.Seq != 5 || me.Reported == "" || !strings.Contains(err.Error(), "rank 1 reported") {
		t.Fatalf("got %v; want rank 1's report of #5", err)
	}
}

// A notice from a peer whose communicator is aborted aborts this one too,
// whichever of its notices comes first: the fault suite's abort case on
// nexar (5 ranks, loaded) once read a peer's refusal of the next Barrier
// before the aborted rank's announcement, and that Barrier failed with the
// refusal instead of ErrAborted; and CI's NCCL tier (4 ranks) once read it
// while its Barrier already ran: a collective that such a notice ends is
// ended by the abort too.
func TestFailureAbortedPeerAborts(t *testing.T) {
	peer := Failure{Rank: 2}
	peer.Abort(errors.New("the user gave up"), true, false)
	eff := peer.Start(3, sigA, nil)
	n, ok := told(eff, Everyone, 3)
	if !ok || !n.Aborted {
		t.Fatalf("an aborted rank's refusal: %+v; want it marked Aborted", eff.Tell)
	}
	f := Failure{Rank: 0}
	f.Start(3, sigA, nil)
	eff = f.Heard(2, n)
	if err := ended(eff, 3); !errors.Is(err, comm.ErrPeerAbandoned) || !errors.Is(err, comm.ErrAborted) || comm.PeerOf(err) != 2 || eff.Aborted != nil {
		t.Fatalf("#3 ended with %v, the communicator aborted %v; want #3 ended by rank 2's abort (comm.ErrAborted, rank 2 named), the communicator's abort left to its end", err, eff.Aborted)
	}
	if eff, _ := f.Finish(3); eff.Aborted == nil {
		t.Fatal("the collective an aborted peer refused ended, and the communicator was not aborted")
	} else if _, ok := told(eff, Everyone, 0); ok {
		t.Fatal("that abort was announced")
	}
	if err := ended(f.Start(4, sigA, nil), 4); !errors.Is(err, comm.ErrAborted) {
		t.Fatalf("the next call: %v; want ErrAborted", err)
	}
	// A notice from a peer that is not aborted (a bad argument) aborts
	// nothing.
	g := Failure{Rank: 0}
	g.Start(3, sigA, nil)
	if eff := g.Heard(2, NoticeOf(3, sigA, &comm.ArgError{Kind: comm.KindAllReduce, Arg: "count", Problem: "is negative"})); eff.Aborted != nil {
		t.Fatal("a peer's bad argument aborted")
	}
}

// TestSeqTable: entries past the array's slots go to the map and back,
// an entry is found wherever it sits, and seqs lists them in order.
func TestSeqTable(t *testing.T) {
	var tb seqTable[int]
	for seq := uint64(10); seq > 0; seq-- {
		tb.set(seq, int(seq)*10)
	}
	tb.set(3, 31) // an update, wherever 3 sits
	if n := tb.len(); n != 10 {
		t.Fatalf("len %d, want 10", n)
	}
	if got := tb.seqs(); !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}) {
		t.Errorf("seqs %v, want 1…10", got)
	}
	for seq := uint64(1); seq <= 10; seq++ {
		want := int(seq) * 10
		if seq == 3 {
			want = 31
		}
		if v, ok := tb.get(seq); !ok || v != want {
			t.Errorf("get(%d) = %d, %v; want %d", seq, v, ok, want)
		}
	}
	for _, seq := range []uint64{10, 1, 7} {
		if v, ok := tb.take(seq); !ok || v != int(seq)*10 {
			t.Errorf("take(%d) = %d, %v", seq, v, ok)
		}
		if _, ok := tb.get(seq); ok {
			t.Errorf("%d still there after take", seq)
		}
		if _, ok := tb.take(seq); ok {
			t.Errorf("%d taken twice", seq)
		}
	}
	tb.set(11, 110) // into a slot freed by take, or the map
	if got := tb.seqs(); !slices.Equal(got, []uint64{2, 3, 4, 5, 6, 8, 9, 11}) {
		t.Errorf("seqs %v after the takes", got)
	}
	if _, ok := tb.get(12); ok {
		t.Error("get(12) found an entry never set")
	}
}
