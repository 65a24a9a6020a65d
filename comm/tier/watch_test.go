package tier

import (
	"context"
	"errors"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// The rule for a part's abort (Watch.PartAborted): a peer's failure aborts
// the composed communicator, now or after the running collective; a
// deadline or a cancel too, asking the census first while a collective
// runs; a mismatch and anything else are left to the phases.
func TestPartAborted(t *testing.T) {
	deadline := ContextError(context.DeadlineExceeded)
	cases := []struct {
		name    string
		cause   error
		idle    PartAction // no collective running
		running PartAction
	}{
		{"a peer failed", &comm.PeerError{Peer: 2, Err: errors.New("killed")}, PartAbort, PartDefer},
		{"a peer's news of a failure", FailPeer.Blamed(1, comm.Blame{Rank: 3, How: "killed"}, "killed"), PartAbort, PartDefer},
		{"this rank's deadline", deadline, PartAbort, PartAsk},
		{"a peer's cancel", FailCanceled.Remote(1, "canceled"), PartAbort, PartAsk},
		{"a peer's deadline", FailTimeout.Remote(1, "timed out"), PartAbort, PartAsk},
		{"a mismatch", &comm.MismatchError{Peer: 1, Seq: 3}, PartIgnore, PartIgnore},
		{"a mismatch's news", FailMismatch.Remote(1, "mismatched"), PartIgnore, PartIgnore},
		{"an earlier abort", &comm.AbortedError{Cause: deadline}, PartIgnore, PartIgnore},
		{"an outside abort", errors.New("the operator"), PartIgnore, PartIgnore},
	}
	for _, c := range cases {
		var w Watch
		if got := w.PartAborted(c.cause); got != c.idle {
			t.Errorf("%s, no collective running: %v, want %v", c.name, got, c.idle)
		}
		w.Started(1, comm.Signature{Kind: comm.KindBarrier})
		if got := w.PartAborted(c.cause); got != c.running {
			t.Errorf("%s, a collective running: %v, want %v", c.name, got, c.running)
		}
	}
}

// StoppedIn finds a rank that stopped in the running collective or before
// it, never this rank, a rank that did not answer, one still going, or
// one that stopped in a later collective.
func TestStoppedIn(t *testing.T) {
	at := func(started uint64, stopped bool) comm.Progress {
		return comm.Progress{Started: started, Stopped: stopped}
	}
	w := Watch{Rank: 0}
	w.Started(5, comm.Signature{Kind: comm.KindBarrier})
	cases := []struct {
		name     string
		answers  []comm.Progress
		answered []bool
		want     bool
	}{
		{"stopped in this one", []comm.Progress{at(5, false), at(5, true), at(5, false)}, []bool{true, true, true}, true},
		{"stopped before it", []comm.Progress{at(5, false), at(4, true)}, []bool{true, true}, true},
		{"stopped in a later one", []comm.Progress{at(5, false), at(6, true)}, []bool{true, true}, false},
		{"going on", []comm.Progress{at(5, false), at(4, false)}, []bool{true, true}, false},
		{"silent", []comm.Progress{at(5, false), at(3, true)}, []bool{true, false}, false},
		{"only this rank stopped", []comm.Progress{at(5, true), at(5, false)}, []bool{true, true}, false},
		{"fewer answered than answers", []comm.Progress{at(5, false), at(5, true)}, []bool{true}, false},
	}
	for _, c := range cases {
		if got := w.StoppedIn(c.answers, c.answered); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
