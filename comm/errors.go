package comm

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinels, for errors.Is. Every error a Communicator returns wraps one of
// them, usually inside an *OpError that says which rank, collective and peer.
var (
	// ErrAborted: the communicator was aborted by an earlier failure (a peer
	// died, a connection broke); every later call fails fast with it and the
	// original cause.
	ErrAborted = errors.New("communicator aborted")
	// ErrClosed: Close was called on this rank.
	ErrClosed = errors.New("communicator closed")
	// ErrTimeout: a deadline passed, on this rank or on a peer.
	ErrTimeout = errors.New("timed out")
	// ErrCanceled: a context was canceled, on this rank or on a peer.
	ErrCanceled = errors.New("canceled")
	// ErrMismatch: ranks called different collectives at the same sequence
	// number, or the same one with different arguments (*MismatchError).
	ErrMismatch = errors.New("mismatched collective")
	// ErrInvalidArgument: an argument is wrong on its own (*ArgError).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrPeerFailed: a peer's process or connection failed (*PeerError).
	ErrPeerFailed = errors.New("peer failed")
	// ErrPeerAbandoned: a peer ended the collective on its side: its context
	// ended or it rejected its own arguments (*RemoteError).
	ErrPeerAbandoned = errors.New("peer abandoned the collective")
	// ErrStalled: this rank's own process was stalled (stopped with
	// SIGSTOP, frozen by a debugger or a VM pause, starved of CPU) for
	// longer than the failure timeout, and its peers gave it up
	// (*StalledError, inside a *PeerError naming this rank): the
	// failures it then finds are its own doing, not its peers'.
	ErrStalled = errors.New("this process was stalled longer than FailureTimeout, and its peers have expelled it")
)

// StalledError is the failure of a rank whose process was stalled for Gap,
// longer than its tier's failure timeout (Timeout), so that its peers gave
// it up: What says how it learned that (a peer's report, a connection
// found dead), Cause what it read. Every tier says it in these words.
type StalledError struct {
	Gap, Timeout time.Duration
	What         string
	Cause        error
}

func (e *StalledError) Error() string {
	return fmt.Sprintf("this process was stalled for %v (stopped, e.g. SIGSTOP, frozen or starved of CPU), longer than FailureTimeout (%v), "+
		"and its peers have expelled it: %s (%v)", e.Gap.Round(time.Millisecond), e.Timeout, e.What, e.Cause)
}

func (e *StalledError) Unwrap() []error { return []error{ErrStalled, e.Cause} }

// OpError is the error of one operation: who returned it, doing what, with
// which peer, and why.
type OpError struct {
	Rank int    // the rank that returns the error
	Peer int    // the peer involved, or -1 when none in particular
	Kind Kind   // the operation
	Seq  uint64 // its sequence number on the communicator (1-based; 0 for Send and Recv)
	Comm string // the communicator's name, e.g. "world" or "world/split(color 1)"
	Err  error  // the cause
}

// Error says what happened. When a rank's failure is behind it (Culprit),
// the cause comes first, in one line, and where this rank met it after:
// "rank 6 (node 1, local 2) failed: it closed its communicator (through
// rail 0, from rank 4); check that process's log — rank 0: AllReduce #1 on
// hierarchy (peer 6)". Otherwise it reads "rank 2: AllReduce #41 on world
// (peer 3): " and the cause.
func (e *OpError) Error() string {
	s := fmt.Sprintf("rank %d: %v", e.Rank, e.Kind)
	if e.Seq != 0 {
		s += fmt.Sprintf(" #%d", e.Seq)
	}
	if e.Comm != "" {
		s += " on " + e.Comm
	}
	if e.Peer >= 0 {
		s += fmt.Sprintf(" (peer %d)", e.Peer)
	}
	if f := culpritError(e.Err); f.err != nil {
		s = f.err.Error() + " — " + s
		if f.aborted {
			s += ", the communicator aborted by it earlier"
		}
		return s
	}
	return s + ": " + e.Err.Error()
}

func (e *OpError) Unwrap() error { return e.Err }

// Culprit is the rank whose failure caused this error — a process that
// died, lost its connection, closed its communicator, fell silent or was
// declared dead — and whether one is known. The rank is one of the
// communicator that returned the error (for a composed communicator such
// as the hierarchy: its own, global ranks; for a Split child: the
// child's). Every error that matches ErrPeerFailed names one when some
// rank could attribute the failure; it is never a rank that is alive and
// well, though it may be this rank itself (a rank that was stalled past
// the failure timeout and expelled by its peers). It is the rank the
// error's text names first.
func (e *OpError) Culprit() (rank int, ok bool) {
	b, ok := CulpritOf(e.Err)
	return b.Rank, ok
}

// ArgError is an argument that is wrong on its own. It is returned on the
// rank that passed it; the other ranks of the collective get a *RemoteError.
type ArgError struct {
	Kind    Kind   // the operation
	Arg     string // the argument: "recv", "root", "sendCounts[2]", …
	Problem string // what is wrong with it, and what was expected
}

func (e *ArgError) Error() string {
	return fmt.Sprintf("%v: invalid %s: %s", e.Kind, e.Arg, e.Problem)
}

func (e *ArgError) Is(target error) bool { return target == ErrInvalidArgument }

// MismatchError says that this rank and Peer disagree on collective Seq
// (or, with Seq 0, on a point-to-point message: a Recv whose buffer does
// not fit the Send's).
type MismatchError struct {
	Peer   int
	Seq    uint64
	Local  Signature // what this rank called; Kind 0 when not known
	Remote Signature // what Peer called; Kind 0 when Peer's call is unknown
	// Reported is set when Peer only reported a mismatch it saw (possibly
	// with a third rank): Peer's own description of it.
	Reported string
}

// Error says what each side called, as far as this rank knows it: the
// fields of the two Signatures that differ, or, where Peer's call is not
// known (it reported the mismatch, or its call agreed in every field a
// Signature carries), what is known.
func (e *MismatchError) Error() string {
	p2p := e.Seq == 0 && (e.Local.Kind == KindSend || e.Local.Kind == KindRecv)
	var b strings.Builder
	if p2p {
		b.WriteString("mismatched message: ")
	} else {
		fmt.Fprintf(&b, "mismatched collective #%d: ", e.Seq)
	}
	local := e.Local.Kind != 0
	if local {
		fmt.Fprintf(&b, "this rank called %v", e.Local)
	}
	switch {
	case e.Reported != "" && local:
		fmt.Fprintf(&b, "; rank %d reported: %s", e.Peer, e.Reported)
	case e.Reported != "":
		fmt.Fprintf(&b, "rank %d reported: %s", e.Peer, e.Reported)
	case !local && e.Remote.Kind == 0:
		fmt.Fprintf(&b, "rank %d disagreed (neither call is known here)", e.Peer)
	case !local:
		fmt.Fprintf(&b, "rank %d called %v", e.Peer, e.Remote)
	case e.Remote.Kind == 0:
		fmt.Fprintf(&b, ", rank %d called something else (its call is not known here)", e.Peer)
	case e.Remote == e.Local:
		fmt.Fprintf(&b, ", and so did rank %d, but with arguments that disagree with this rank's beyond what a signature shows (such as AllToAllV's counts)", e.Peer)
	case p2p:
		remote := e.Remote
		remote.Kind = e.Local.Kind // a Send meets a Recv: only the rest must agree
		fmt.Fprintf(&b, ", rank %d called %v (%s)", e.Peer, e.Remote, differences(e.Local, remote))
	default:
		fmt.Fprintf(&b, ", rank %d called %v (%s)", e.Peer, e.Remote, differences(e.Local, e.Remote))
	}
	if e.Reported == "" {
		if p2p {
			b.WriteString("; a Recv's buffer must have the dtype and length of the Send's")
		} else {
			b.WriteString("; every rank must start the same collectives in the same order with the same counts, dtypes, ops and roots")
		}
	}
	return b.String()
}

// differences names the fields in which a and b differ: "the count
// differs", "the kind and the root differ".
func differences(a, b Signature) string {
	var fields []string
	for _, f := range []struct {
		name string
		same bool
	}{
		{"kind", a.Kind == b.Kind}, {"dtype", a.DType == b.DType}, {"count", a.Count == b.Count},
		{"op", a.Op == b.Op}, {"root", a.Root == b.Root}, {"user's call of which this is a phase (or the batch it is in)", a.Outer == b.Outer},
	} {
		if !f.same {
			fields = append(fields, "the "+f.name)
		}
	}
	switch len(fields) {
	case 0:
		return "the same"
	case 1:
		return fields[0] + " differs"
	}
	return strings.Join(fields[:len(fields)-1], ", ") + " and " + fields[len(fields)-1] + " differ"
}

func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// PeerError is the failure of a peer's process or of the connection to it.
type PeerError struct {
	Peer int
	Addr string // the peer's address, when known
	Err  error
}

func (e *PeerError) Error() string {
	who := fmt.Sprintf("rank %d", e.Peer)
	if e.Addr != "" {
		who += " (" + e.Addr + ")"
	}
	return fmt.Sprintf("%s failed: %v; check that process's log", who, e.Err)
}

// ViaError is the Err of a *PeerError that a composed communicator makes
// from one of its parts' errors: How is what happened to the failed rank,
// in the words of the rank that saw it, Via how the news reached this
// rank ("through rail 0, from rank 4"), and Err the part's own error
// (which names ranks in the part's terms).
type ViaError struct {
	How string
	Via string
	Err error
}

func (e *ViaError) Error() string {
	if e.Via == "" {
		return e.How
	}
	return e.How + " (" + e.Via + ")"
}

func (e *ViaError) Unwrap() error { return e.Err }

func (e *PeerError) Unwrap() error { return e.Err }

func (e *PeerError) Is(target error) bool { return target == ErrPeerFailed }

// RemoteError is a peer's report that it ended the collective on its side.
type RemoteError struct {
	Peer   int
	Reason string // the peer's own error, as text
	// Timeout and Canceled say whether the peer's context ended, so that
	// errors.Is(err, ErrTimeout) holds on every rank of a timed-out collective.
	Timeout, Canceled bool
	// PeerFailed says the peer ended it because some rank failed, so that
	// errors.Is(err, ErrPeerFailed) holds on every survivor, also on one
	// that first hears of the failure from another survivor.
	PeerFailed bool
	// Mismatch says the peer ended it because ranks disagreed on a
	// collective, so that errors.Is(err, ErrMismatch) holds on every rank,
	// also on one that hears of it only through an aborted communicator
	// (the parts of a composed communicator, see Control).
	Mismatch bool
	// Culprit, with PeerFailed, is the rank whose failure the peer gave
	// up for, and Reason then says what happened to it; -1 when the peer
	// could not name one. It is a rank of this communicator, or, with
	// CulpritOutside, of the composed communicator this one is a part of
	// (the peer's side was aborted by it, through Control's Abort, and it named
	// the rank in its own terms).
	Culprit        int
	CulpritOutside bool
	// Who, if set, names Peer in the job's terms, for a communicator whose
	// ranks are not the job's: "rank 4" from a shared-memory part with
	// Config.Ranks, "world rank 7 (rank 3 here)" from a nexar Split
	// child. The text travels on, quoted in other ranks' errors (a
	// composed communicator's parts relay it), where only a name the user
	// knows means anything. If empty: "rank 2".
	Who string
}

func (e *RemoteError) Error() string {
	who := e.Who
	if who == "" {
		who = fmt.Sprintf("rank %d", e.Peer)
	}
	if e.PeerFailed && e.Culprit >= 0 {
		return fmt.Sprintf("rank %d failed: %s (told by %s)", e.Culprit, e.Reason, who)
	}
	return fmt.Sprintf("%s ended the collective on its side: %s", who, e.Reason)
}

func (e *RemoteError) Is(target error) bool {
	return target == ErrPeerAbandoned || (e.Timeout && target == ErrTimeout) || (e.Canceled && target == ErrCanceled) ||
		(e.PeerFailed && target == ErrPeerFailed) || (e.Mismatch && target == ErrMismatch)
}

// LateError is a deadline that passed while peers had not started the
// collective this rank waited in: the likely stragglers. Err is the
// deadline's error (ErrTimeout).
type LateError struct {
	Err error
	// Ranks had not started collective Seq; Last[i] is the last one
	// Ranks[i] had started. Ranks are of the communicator that returned
	// the error.
	Ranks []int
	Last  []uint64
	Seq   uint64
	// Who, if set, names each rank (Who[i] for Ranks[i]) and What the
	// collective, for a composed communicator that reports a part's
	// stragglers in its own terms ("rank 3 (node 1, local 1)", "rail 1's
	// AllReduce #7"). If empty: "rank 3", "collective #7".
	Who  []string
	What string
	// Silent are ranks that did not say, when asked, which collective
	// they were at (a composed communicator's census): stopped, cut off,
	// or too slow to answer; Err says so. A straggler may be among them
	// when Ranks is empty.
	Silent []int
}

func (e *LateError) Error() string {
	var b strings.Builder
	b.WriteString(e.Err.Error())
	what := e.What
	if what == "" {
		what = fmt.Sprintf("collective #%d", e.Seq)
	}
	for i, r := range e.Ranks {
		who := fmt.Sprintf("rank %d", r)
		if i < len(e.Who) {
			who = e.Who[i]
		}
		if i < len(e.Last) {
			fmt.Fprintf(&b, " (%s had not started %s; its last was #%d)", who, what, e.Last[i])
		} else {
			fmt.Fprintf(&b, " (%s had not started %s)", who, what)
		}
	}
	return b.String()
}

func (e *LateError) Unwrap() error { return e.Err }

// AbortedError is the error of every call on a communicator that an earlier
// failure aborted; Cause is that failure.
type AbortedError struct{ Cause error }

func (e *AbortedError) Error() string {
	return fmt.Sprintf("communicator aborted by an earlier failure: %v", e.Cause)
}

func (e *AbortedError) Unwrap() []error { return []error{ErrAborted, e.Cause} }

// PlainAbandon reports whether err says only that a peer abandoned the
// operation because of its own bad argument, so that the communicator that
// returned it is still usable (no timeout, cancel, failure, mismatch,
// abort or close is behind it).
func PlainAbandon(err error) bool {
	if !errors.Is(err, ErrPeerAbandoned) {
		return false
	}
	for _, e := range []error{ErrTimeout, ErrCanceled, ErrPeerFailed, ErrMismatch, ErrAborted, ErrClosed} {
		if errors.Is(err, e) {
			return false
		}
	}
	return true
}

// EndedByDeadline reports whether err, the error a collective (or Split)
// ended with on this rank, is a deadline or a cancel — this rank's, or a
// peer's that came as its notice — and neither a mismatch nor an abort
// already under way. Under the rule every tier follows, such a collective
// aborts the communicator on every rank: the ranks may have left it in
// different steps, so no later call could be trusted to meet the same
// call everywhere. Every later call then fails fast with ErrAborted and
// the deadline's kind. (Send and Recv are not collectives: their deadline
// ends that call only. A bad argument leaves the communicator usable:
// PlainAbandon.)
func EndedByDeadline(err error) bool {
	return err != nil && (errors.Is(err, ErrTimeout) || errors.Is(err, ErrCanceled)) &&
		!errors.Is(err, ErrAborted) && !errors.Is(err, ErrMismatch)
}

// PeerOf is the peer an error names (a rank of the communicator that
// returned it: a *MismatchError's, *RemoteError's or *PeerError's Peer, a
// *LateError's first rank, or an *OpError's), or -1.
func PeerOf(err error) int {
	var me *MismatchError
	if errors.As(err, &me) {
		return me.Peer
	}
	var re *RemoteError
	if errors.As(err, &re) {
		return re.Peer
	}
	var pe *PeerError
	if errors.As(err, &pe) {
		return pe.Peer
	}
	var le *LateError
	if errors.As(err, &le) && len(le.Ranks) > 0 {
		return le.Ranks[0]
	}
	var oe *OpError
	if errors.As(err, &oe) {
		return oe.Peer
	}
	return -1
}

// Blame is the rank an error holds responsible for a failure (CulpritOf).
type Blame struct {
	// Rank is the failed rank: a rank of the communicator whose error
	// holds the Blame, or, with Outside, of the composed communicator it
	// is a part of (see RemoteError.CulpritOutside).
	Rank    int
	Outside bool
	// How is what happened to it, in the words of the rank that saw it
	// ("its process (pid 4242) is gone"), without how the news traveled.
	How string
}

// CulpritOf finds the rank err blames: the first *PeerError in err's
// chain, or *RemoteError that names the failed rank. A communicator that
// tells its peers of a failure sends them the Blame, so that each names
// the same rank; a composed one maps the part's Blame to its own ranks.
func CulpritOf(err error) (Blame, bool) {
	f := culpritError(err)
	outside := f.outside
	switch c := f.err.(type) {
	case *PeerError:
		how := c.Err.Error()
		if v, ok := c.Err.(*ViaError); ok {
			how = v.How
		}
		return Blame{Rank: c.Peer, Outside: outside, How: how}, true
	case *RemoteError:
		return Blame{Rank: c.Culprit, Outside: outside || c.CulpritOutside, How: c.Reason}, true
	}
	return Blame{Rank: -1}, false
}

// culprit is what culpritError found: the error that names a failed rank
// (nil if none), whether an *AbortedError came before it, and whether it
// came from outside (tier.FromOutside).
type culprit struct {
	err              error
	aborted, outside bool
	marked           bool // outside was set by a marker (tier.FromOutside, tier.Inside) below the top
}

// culpritError is the first error in err's chain (depth first, as
// errors.As searches) that names a failed rank.
func culpritError(err error) culprit {
	var f culprit
	for err != nil {
		switch e := err.(type) {
		case *PeerError:
			f.err = e
			return f
		case *RemoteError:
			if e.PeerFailed && e.Culprit >= 0 {
				f.err = e
				return f
			}
			return culprit{}
		case interface{ BlamesOutside() bool }: // tier.FromOutside's and tier.Inside's markers
			f.outside, f.marked = e.BlamesOutside(), true
			err = errors.Unwrap(err)
			continue
		case *AbortedError:
			f.aborted = true
			err = e.Cause
			continue
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				if in := culpritError(inner); in.err != nil {
					in.aborted = in.aborted || f.aborted
					if !in.marked { // the nearest marker decides
						in.outside = f.outside
					}
					in.marked = in.marked || f.marked
					return in
				}
			}
			return culprit{}
		}
		err = errors.Unwrap(err)
	}
	return culprit{}
}
