package tier

import (
	"errors"
	"fmt"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// Watch is one rank's side of a composed communicator's census (see
// census.go): it keeps where this rank stands (Progress), says when a
// collective has waited long enough to ask every rank (Tick), and turns
// the answers into a verdict (Answers). It does no I/O and reads no clock:
// the communicator feeds it its calls, the time of its ticks and the
// answers of the censuses it takes, and carries out what Answers returns
// (abort with the mismatch; announce this rank's Progress, Aborting), so the rules
// are tested by a simulated world of Watches (watch_sim_test.go). Its
// methods are not safe for concurrent use: the owner guards it.
type Watch struct {
	// Rank is this rank's number in the census's answers.
	Rank int
	// AskAfter is the least time a collective runs before the first
	// census; Expect, if set, adds the time the collective is expected to
	// take (a composed communicator's cost model, a few times over).
	// AskAtMost bounds the time between the censuses of a collective that
	// keeps waiting (each waits twice the one before). AskAfter ≤ 0: Tick
	// never asks.
	AskAfter, AskAtMost time.Duration
	Expect              func(comm.Signature) time.Duration

	progress  comm.Progress
	running   bool
	seen      uint64    // the collective Tick last saw running; 0: none
	next      time.Time // when Tick asks about it
	wait      time.Duration
	found     *comm.MismatchError
	announced bool
}

// Verdict is what a census's answers decide.
type Verdict struct {
	// Mismatch is the mismatch found, this one or an earlier verdict's
	// (a verdict stands): abort with it. Nil: none yet.
	Mismatch *comm.MismatchError
	// Behind says that a rank that answered has not yet started the
	// collective asked about: it may still be in an earlier one, which a
	// verdict would fail; ask again later.
	Behind bool
	// Silent says that a rank did not answer (it closed, stopped or
	// died); its announcement may still be on its way.
	Silent bool
}

// Started records that collective seq, the user's call sig, began to run;
// collectives start in order, one at a time.
func (w *Watch) Started(seq uint64, sig comm.Signature) {
	w.progress.Record(seq, sig)
	w.running = true
}

// Ended records that the running collective ended.
func (w *Watch) Ended() { w.running = false }

// Running reports whether a collective is running.
func (w *Watch) Running() bool { return w.running }

// Progress is where this rank stands: what it answers a census.
func (w *Watch) Progress() comm.Progress { return w.progress }

// Found is the mismatch a census found, or nil.
func (w *Watch) Found() *comm.MismatchError { return w.found }

// Tick is called at regular times now (at most AskAfter/2 apart for a
// census within 1.5 AskAfter); it reports whether to take a census about
// collective Progress().Started now: it has run since an earlier tick for
// its time (AskAfter and Expect), or for twice the previous interval
// since the last census, and no verdict has been found.
func (w *Watch) Tick(now time.Time) bool {
	cur := w.progress.Started
	switch {
	case !w.running || w.found != nil || w.AskAfter <= 0:
		w.seen = 0
		return false
	case cur != w.seen: // first seen running at this tick
		w.seen, w.wait = cur, w.AskAfter
		if call, ok := w.progress.Call(cur); ok && w.Expect != nil {
			w.wait += w.Expect(call)
		}
		w.next = now.Add(w.wait)
		return false
	case now.Before(w.next):
		return false
	}
	w.wait = min(2*w.wait, max(w.AskAtMost, w.wait))
	w.next = now.Add(w.wait)
	return true
}

// Answers judges a census's answers about collective seq (this rank's
// current one, or the one a part found mismatched): see Judge. A verdict
// once found stands.
func (w *Watch) Answers(seq uint64, answers []comm.Progress, answered []bool) Verdict {
	if w.found != nil {
		return Verdict{Mismatch: w.found}
	}
	me, behind := Judge(w.Rank, w.progress, seq, answers, answered)
	if me == nil {
		_, _, silent := Stragglers(w.Rank, seq, answers, answered)
		return Verdict{Behind: behind, Silent: len(silent) > 0}
	}
	w.found = me
	return Verdict{Mismatch: me}
}

// Aborting is told that the communicator is being aborted with cause
// (from now on its Progress says Stopped: it starts no further
// collective, so no census waits for it to); it reports whether to tell
// every rank this rank's Progress
// (comm.Control.Announce): once, for a mismatch, whoever found it (a
// census or a part), so that a rank that meets the mismatch after this
// one has left still sees this rank's calls.
func (w *Watch) Aborting(cause error) (announce bool) {
	w.progress.Stopped = true
	if w.announced || !errors.Is(cause, comm.ErrMismatch) {
		return false
	}
	w.announced = true
	return true
}

// PartAction is what a composed communicator does when one of its parts
// is aborted (Watch.PartAborted).
type PartAction int

const (
	// PartIgnore leaves the part's abort to the phases that meet it: a
	// mismatch (reported in the user's terms once every rank has reached
	// it), or an abort that is no news of a failure.
	PartIgnore PartAction = iota
	// PartAbort aborts the composed communicator now.
	PartAbort
	// PartDefer aborts it when the running collective ends: the news may
	// be of a later collective of ranks ahead of this one, which this one
	// can complete without (a rank that left after a Barrier every rank
	// had entered), and aborting now would fail it on healthy parts.
	PartDefer
	// PartAsk takes a census first (a deadline or a cancel, while a
	// collective runs): if StoppedIn finds a rank that stopped in this
	// collective or before it, the news is of this one, which cannot
	// complete on every rank: abort now, so that a rank waiting in another
	// part for a rank yet to come does not wait for it. Else defer.
	PartAsk
)

func (a PartAction) String() string {
	switch a {
	case PartIgnore:
		return "ignore"
	case PartAbort:
		return "abort"
	case PartDefer:
		return "defer"
	case PartAsk:
		return "ask"
	}
	return fmt.Sprintf("PartAction(%d)", int(a))
}

// PartAborted is told that a part was aborted with cause (the composed
// communicator's cause, its ranks in the composed communicator's terms)
// and says what to do. A peer's failure aborts the composed communicator
// (now, or when the running collective ends), and so does a deadline or
// a cancel (the rule of every tier, comm.EndedByDeadline); anything else is
// left to the phases.
func (w *Watch) PartAborted(cause error) PartAction {
	deadline := comm.EndedByDeadline(cause)
	switch {
	case !deadline && (!errors.Is(cause, comm.ErrPeerFailed) || errors.Is(cause, comm.ErrMismatch)):
		return PartIgnore
	case !w.running:
		return PartAbort
	case deadline:
		return PartAsk
	}
	return PartDefer
}

// StoppedIn reports whether a census's answers show a rank (not this one)
// that has stopped — its communicator was aborted — in the running
// collective or before it: that collective cannot complete on every rank.
func (w *Watch) StoppedIn(answers []comm.Progress, answered []bool) bool {
	for r, p := range answers {
		if r != w.Rank && r < len(answered) && answered[r] && p.Stopped && p.Started <= w.progress.Started {
			return true
		}
	}
	return false
}

// Stragglers are, from a census's answers about collective seq, the ranks
// that had not started it (with the last they had) and the ranks that did
// not answer, this rank (rank) left out: what a deadline's error names.
func Stragglers(rank int, seq uint64, answers []comm.Progress, answered []bool) (late []int, last []uint64, silent []int) {
	for r := range answers {
		switch {
		case r == rank:
		case r >= len(answered) || !answered[r]:
			silent = append(silent, r)
		case answers[r].Started < seq:
			late = append(late, r)
			last = append(last, answers[r].Started)
		}
	}
	return late, last, silent
}
