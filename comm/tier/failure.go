package tier

import (
	"errors"
	"math"

	"github.com/hiercomm/hiercomm/comm"
)

// Failure is the failure state machine of one rank of one communicator,
// written once for every tier: it decides how each collective ends, when
// the communicator is aborted and with which cause, which rank a failure
// is blamed on, when two ranks' calls differ (a mismatch), and what the
// peers must be told. It does no I/O, holds no lock and reads no clock,
// in the style of etcd's raft core: its owner feeds it what happened (a
// collective started, failed here or ended; a peer's Notice; a frame's
// Signature; a probe; an abort) under the owner's lock, and carries out
// the Effects each input returns — end these collectives with these
// errors, send these notices, the communicator is now aborted. The rules
// are checked by a simulated world of Failures that loses, delays and
// reorders their notices, kills ranks and mismatches calls
// (failure_sim_test.go).
//
// The rules, once:
//   - A collective's first failure is its error; a rank that fails one
//     tells every peer (a Notice), so none waits for it.
//   - The communicator is aborted by its first cause (Abort), which later
//     calls are refused with (a *comm.AbortedError) and which ends every
//     collective in flight. An abort is announced to every peer (a Notice
//     with Seq 0), but for a mismatch, which travels as the collectives'
//     notices (they keep both calls) — unless a composed communicator
//     chose it for its parts (Abort with announce set).
//   - A mismatch aborts: the ranks no longer agree on what a sequence
//     number means. It is found wherever two calls meet: a frame or a
//     probe whose Signature differs from this rank's call for its
//     sequence number, now, before this rank starts it (kept for Start)
//     or after it finished (the last RecentCalls calls are kept), and
//     whoever finds it tells the other side.
//   - The deadline rule: a collective that a deadline or a cancel ended
//     (this rank's, or a peer's through its notice; comm.EndedByDeadline)
//     aborts the communicator, quietly: the collective's notice has told
//     every peer already. A later announced abort still announces.
//   - A peer whose communicator is aborted takes part in nothing again:
//     its notice (Notice.Aborted) aborts this communicator too, quietly,
//     once the collective it names ends here.
//   - Blame: a Notice names the rank a peer failure is blamed on (its
//     culprit), never the rank that relayed it; a Notice that blames this
//     rank itself means its peers gave it up.
//
// Set Rank before the first input; the first collective is Start'ed with
// sequence number 1.
type Failure struct {
	// Rank is this rank's number in the communicator.
	Rank int
	// Rename, if set, rewrites every *comm.RemoteError made from a peer's
	// Notice: a tier's way to name the peer (a Split child's peer by its
	// world rank first, comm.RemoteError.Who).
	Rename func(*comm.RemoteError) *comm.RemoteError
	// GaveUp, if set, is asked for the error of a Notice that blames this
	// rank itself (its peers gave it up, re): a tier that can tell that
	// its process was stalled returns that (comm.ErrStalled); nil keeps the
	// default, re with "its peers gave this rank up: " before its reason.
	GaveUp func(from int, re *comm.RemoteError) error

	started uint64
	ops     seqTable[failOp] // by value: a collective allocates nothing here
	recent  [RecentCalls]recentCall
	ahead   seqTable[aheadNote]
	aborted *comm.AbortedError
	quiet   bool                // aborted by the deadline rule, unannounced
	own     *comm.MismatchError // the mismatch of this communicator's own calls that aborted it
}

// RecentCalls is how many finished collectives a Failure remembers, to
// find a mismatch in a frame or a probe that comes after this rank
// finished its part (it only sent, or its peers' frames came first).
const RecentCalls = 64

// abortedPrefix comes before the reason of a peer whose communicator is
// aborted, when it blames no rank.
const abortedPrefix = "its side of the communicator was aborted: "

// MaxReason is the longest reason a Notice carries.
const MaxReason = 4096

type failOp struct {
	sig     comm.Signature
	err     error // the first failure
	refused bool  // failed before it began: frames for it are dropped
	// then is the abort its Finish makes: a peer that is aborted told
	// of this collective (Notice.Aborted).
	then error
}

type recentCall struct {
	seq uint64
	sig comm.Signature
}

// aheadNote is what peers said of a collective this rank has not started.
// Two distinct calls are enough to keep: whatever this rank calls, it
// differs from one of them if they differ.
type aheadNote struct {
	sigFrom   int // the first rank whose Signature came, or -1
	sig       comm.Signature
	otherFrom int // the first rank whose Signature differs from sig, or -1
	other     comm.Signature
	fail      *heard // a failure notice
}

type heard struct {
	from int
	n    Notice
}

// Notice is what a rank tells its peers of a failure: that it ended
// collective Seq (0: that it aborted the communicator), how (Code), the
// rank it blames (Culprit, -1 for none; numbered outside the
// communicator, by a composer, when Outside) and why. Every tier carries
// it on its own channels: nexar as a failure frame, shm as a rank's abort
// record.
type Notice struct {
	Seq     uint64
	Sig     comm.Signature // the sender's call at Seq (a mismatch's other side)
	Code    FailCode
	Culprit int
	Outside bool
	// Aborted says that the sender's communicator is aborted: it takes
	// part in no collective again, so the receiver's is aborted too.
	Aborted bool
	Reason  string
}

// NoticeOf is the Notice of err at collective seq, call sig: for a peer's
// failure that err blames on a rank (comm.CulpritOf), that rank, and only what
// happened to it as the reason, so that every rank that hears of it names
// the same rank as the one that saw it.
func NoticeOf(seq uint64, sig comm.Signature, err error) Notice {
	n := Notice{Seq: seq, Sig: sig, Code: FailCodeOf(err), Culprit: -1, Aborted: seq == 0 || errors.Is(err, comm.ErrAborted), Reason: err.Error()}
	if b, ok := comm.CulpritOf(err); ok && n.Code == FailPeer && b.Rank >= 0 && b.Rank <= math.MaxInt32 {
		n.Culprit, n.Outside, n.Reason = b.Rank, b.Outside, b.How
	}
	if len(n.Reason) > MaxReason {
		n.Reason = n.Reason[:MaxReason]
	}
	return n
}

// Effects is what the owner of a Failure carries out after an input.
type Effects struct {
	// End lists the collectives that failed now, each with its error:
	// end their waits.
	End []Ended
	// Tell lists the notices to send.
	Tell []Tell
	// Aborted is set when this input aborted the communicator (the
	// *comm.AbortedError later calls get): wake what waits on the abort.
	Aborted *comm.AbortedError
}

// Ended is a collective that failed, and its error.
type Ended struct {
	Seq uint64
	Err error
}

// Tell is a Notice to send to rank To, or to every other rank when To is
// Everyone.
type Tell struct {
	To     int
	Notice Notice
}

// Everyone is Tell.To for every rank but this one.
const Everyone = -1

// Add appends more to e: the effects of several inputs, carried out together.
func (e *Effects) Add(more Effects) {
	e.End = append(e.End, more.End...)
	e.Tell = append(e.Tell, more.Tell...)
	if more.Aborted != nil {
		e.Aborted = more.Aborted
	}
}

// Started is the sequence number of the last collective started.
func (f *Failure) Started() uint64 { return f.started }

// Aborted is the error later calls are refused with (a *comm.AbortedError),
// or nil.
func (f *Failure) Aborted() error {
	if f.aborted == nil {
		return nil
	}
	return f.aborted
}

// AbortCause is the failure that aborted the communicator, or nil.
func (f *Failure) AbortCause() error {
	if f.aborted == nil {
		return nil
	}
	return f.aborted.Cause
}

// Err is collective seq's first failure while it runs, or nil.
func (f *Failure) Err(seq uint64) error {
	if o, ok := f.ops.get(seq); ok {
		return o.err
	}
	return nil
}

// Start records that collective seq, the call sig, begins; refused, if
// not nil, is why this rank refuses it (a bad argument, a context that
// ended before it began). A refused call, or any call once the
// communicator is aborted, still takes its number and its peers are told,
// so that none waits for this rank. What peers said of seq before ends
// it now: a frame with a different Signature (a mismatch, whatever
// else came), else the first failure notice.
func (f *Failure) Start(seq uint64, sig comm.Signature, refused error) Effects {
	f.started = seq
	if refused == nil && f.aborted != nil {
		refused = f.aborted
	}
	f.ops.set(seq, failOp{sig: sig, refused: refused != nil})
	a, had := f.ahead.take(seq)
	switch {
	case refused != nil:
		return f.Fail(seq, refused, true)
	case had && a.sigFrom >= 0 && !SigMatch(sig, a.sig):
		return f.Fail(seq, &comm.MismatchError{Peer: a.sigFrom, Seq: seq, Local: sig, Remote: a.sig}, true)
	case had && a.otherFrom >= 0 && !SigMatch(sig, a.other):
		return f.Fail(seq, &comm.MismatchError{Peer: a.otherFrom, Seq: seq, Local: sig, Remote: a.other}, true)
	case had && a.fail != nil:
		eff := f.Fail(seq, f.remoteFailure(a.fail.from, a.fail.n, seq, sig), true)
		if n := a.fail.n; n.Aborted && n.Code != FailMismatch {
			eff.Add(f.abortAfter(a.fail.from, n, seq))
		}
		return eff
	}
	return Effects{}
}

// Fail records that collective seq failed with err on this rank (or
// through a peer's news); with notify, every peer is told. The first
// failure of a collective is its error. A mismatch aborts the
// communicator, also when it is found after this rank's part of seq
// ended well (it is told then, if notify, since no one was).
func (f *Failure) Fail(seq uint64, err error, notify bool) Effects {
	var eff Effects
	o, ok := f.ops.get(seq)
	mismatch := errors.Is(err, comm.ErrMismatch)
	switch {
	case ok && o.err == nil:
		o.err = err
		f.ops.set(seq, o)
		eff.End = append(eff.End, Ended{Seq: seq, Err: err})
		if notify {
			eff.Tell = append(eff.Tell, Tell{To: Everyone, Notice: f.noticeFor(seq, o.sig, err)})
		}
	case ok || !mismatch || f.aborted != nil:
		// It failed already and said so, it finished (news of a failure
		// that is not a mismatch changes nothing after the end), or this
		// is the abort reaching it.
		return eff
	case notify:
		var sig comm.Signature
		if r := f.recent[seq%RecentCalls]; r.seq == seq {
			sig = r.sig
		}
		eff.Tell = append(eff.Tell, Tell{To: Everyone, Notice: f.noticeFor(seq, sig, err)})
	}
	if mismatch && f.aborted == nil {
		eff.Add(f.Abort(err, false, false))
	}
	return eff
}

// noticeFor is the Notice of collective seq's failure err. A
// communicator aborted by a mismatch at an earlier collective tells that
// one's (this rank's call there), so that a peer that finished it (its
// part only sent) and waits here reports the collective at which the
// calls differ, not this one.
//
// Only a mismatch of this communicator's own calls is told so: one a
// composed communicator aborted it with (its sequence numbers are the
// composer's) is told at seq, as the abort it is.
func (f *Failure) noticeFor(seq uint64, sig comm.Signature, err error) Notice {
	if me := (*comm.MismatchError)(nil); errors.As(err, &me) && me == f.own && me.Seq != 0 && me.Seq < seq && me.Local.Kind != 0 {
		seq, sig = me.Seq, me.Local
	}
	return NoticeOf(seq, sig, err)
}

// Finish retires collective seq and returns its error (nil if it
// succeeded: its call is remembered for a late frame or probe). A failure
// that comes after this is too late to change its outcome (Fail). By the
// deadline rule, a collective that a deadline or a cancel ended aborts
// the communicator, unannounced; so does one an aborted peer told of
// (Heard).
func (f *Failure) Finish(seq uint64) (Effects, error) {
	o, ok := f.ops.take(seq)
	if !ok {
		return Effects{}, nil
	}
	var eff Effects
	if o.err == nil {
		f.recent[seq%RecentCalls] = recentCall{seq: seq, sig: o.sig}
	} else if comm.EndedByDeadline(o.err) {
		eff = f.Abort(o.err, false, true)
	}
	if o.then != nil {
		eff.Add(f.Abort(o.then, false, true))
	}
	return eff, o.err
}

// Abort aborts the communicator with cause; the first cause stays. Every
// collective in flight fails with the *comm.AbortedError, and its peers are
// told. announce says whether the abort itself is told to every peer (a
// Notice with Seq 0): the first abort's, or a later one after a quiet
// first (quiet: the deadline rule's).
func (f *Failure) Abort(cause error, announce, quiet bool) Effects {
	var eff Effects
	first := f.aborted == nil
	if first {
		f.aborted = &comm.AbortedError{Cause: cause}
		f.quiet = quiet
		f.own, _ = cause.(*comm.MismatchError) // not one from outside (FromOutside, Inside)
		eff.Aborted = f.aborted
	}
	announce = announce && (first || f.quiet)
	f.quiet = f.quiet && !announce
	for _, seq := range f.ops.seqs() {
		if o, _ := f.ops.get(seq); o.err == nil {
			eff.Add(f.Fail(seq, f.aborted, true))
		}
	}
	if announce {
		eff.Tell = append(eff.Tell, Tell{To: Everyone, Notice: NoticeOf(0, comm.Signature{}, cause)})
	}
	return eff
}

// AbortFor is Abort with the announcement rule of an abort a tier raises
// itself: announced, but for a mismatch (its notices keep both calls).
func (f *Failure) AbortFor(cause error) Effects {
	return f.Abort(cause, !errors.Is(cause, comm.ErrMismatch), false)
}

// Heard handles a peer's Notice: of an abort (Seq 0), the communicator is
// aborted; of a collective this rank runs, it fails; of one not started
// yet, Start fails it; of one finished, only a mismatch counts (it
// aborts: this rank's next call reports it). A notice from a peer whose
// communicator is aborted (Notice.Aborted) aborts this one too, whichever
// of them reaches it first: that peer takes part in nothing again, so
// this rank's next call fails with comm.ErrAborted, not with the peer's
// refusal of it.
func (f *Failure) Heard(from int, n Notice) Effects {
	if n.Seq == 0 {
		return f.AbortFor(f.noticeError(from, n, abortedPrefix))
	}
	eff := f.heard(from, n)
	if n.Aborted && n.Code != FailMismatch && n.Seq <= f.started { // a mismatch aborts by its own rules, keeping both calls
		eff.Add(f.abortAfter(from, n, n.Seq))
	}
	return eff
}

// abortAfter aborts the communicator when collective seq finishes (now,
// if it has), for the Notice n of an aborted peer: not before, so that an
// earlier collective still in flight, which the peer may have completed
// before it aborted, is not failed by the news of a later one. (Of a
// collective not started yet, Start takes the notice.) The abort is
// quiet, as the deadline rule's: the aborted peer's own notices reach
// every rank, and an announcement could reach a rank still in an earlier
// collective and fail it.
func (f *Failure) abortAfter(from int, n Notice, seq uint64) Effects {
	cause := f.noticeError(from, n, abortedPrefix)
	o, ok := f.ops.get(seq)
	if !ok {
		return f.Abort(cause, false, true)
	}
	if o.then == nil {
		o.then = cause
		f.ops.set(seq, o)
	}
	return Effects{}
}

func (f *Failure) heard(from int, n Notice) Effects {
	if n.Seq > f.started {
		if a := f.aheadFor(n.Seq); a.fail == nil { // the first notice, as for a running collective
			a.fail = &heard{from: from, n: n}
			f.ahead.set(n.Seq, a)
		}
		return Effects{}
	}
	if o, ok := f.ops.get(n.Seq); ok {
		return f.Fail(n.Seq, f.remoteFailure(from, n, n.Seq, o.sig), true)
	}
	if n.Code != FailMismatch {
		return Effects{}
	}
	var local comm.Signature // unknown, unless the slot still holds this collective
	if r := f.recent[n.Seq%RecentCalls]; r.seq == n.Seq {
		local = r.sig
	}
	return f.AbortFor(&comm.MismatchError{Peer: from, Seq: n.Seq, Local: local, Remote: n.Sig, Reported: n.Reason})
}

// Frame checks the Signature of a data frame of collective seq from
// peer: a different call is a mismatch, now (the collective fails), once
// this rank starts seq (Start), or, for a collective finished here,
// found late (the communicator is aborted and the sender told). keep
// says whether the frame is for a collective that may still take it.
func (f *Failure) Frame(from int, seq uint64, sig comm.Signature) (keep bool, eff Effects) {
	if seq > f.started {
		f.aheadSig(from, seq, sig)
		return true, Effects{}
	}
	o, ok := f.ops.get(seq)
	if !ok {
		return false, f.late(from, seq, sig)
	}
	if !SigMatch(o.sig, sig) {
		return false, f.Fail(seq, &comm.MismatchError{Peer: from, Seq: seq, Local: o.sig, Remote: sig}, true)
	}
	return !o.refused, Effects{}
}

// late checks the Signature of a late frame of collective seq, finished
// here: a different call aborts, and the sender is told (it may be
// waiting on a rank that will not come).
func (f *Failure) late(from int, seq uint64, sig comm.Signature) Effects {
	mine, differ := f.finishedDiffers(seq, sig)
	if !differ {
		return Effects{}
	}
	err := &comm.MismatchError{Peer: from, Seq: seq, Local: mine, Remote: sig}
	eff := f.AbortFor(err)
	eff.Tell = append(eff.Tell, Tell{To: from, Notice: mismatchNotice(seq, mine, err)})
	return eff
}

// finishedDiffers reports this rank's call at collective seq, finished
// here, and whether it differs from sig (false when seq is no longer
// among the RecentCalls kept).
func (f *Failure) finishedDiffers(seq uint64, sig comm.Signature) (mine comm.Signature, differ bool) {
	r := f.recent[seq%RecentCalls]
	return r.sig, r.seq == seq && !SigMatch(r.sig, sig)
}

// mismatchNotice tells a peer that this rank's call at seq was mine, and
// what it found (me).
func mismatchNotice(seq uint64, mine comm.Signature, me *comm.MismatchError) Notice {
	return Notice{Seq: seq, Sig: mine, Code: FailMismatch, Culprit: -1, Reason: me.Error()}
}

// Probe is what a Failure says of a collective a peer asked about.
type Probe int

const (
	// ProbeNothing: no answer (it failed or finished here; any mismatch
	// has been told).
	ProbeNothing Probe = iota
	// ProbeAhead: this rank has not started it (its last is Started).
	ProbeAhead
	// ProbeRunning: it runs here with the same call.
	ProbeRunning
)

// Probed handles a peer's question, asked after waiting a while for this
// rank, about collective seq, its call sig: a different call here is a
// mismatch on both sides (it fails here, or the peer is told if it
// finished here).
func (f *Failure) Probed(from int, seq uint64, sig comm.Signature) (Probe, Effects) {
	if seq > f.started {
		f.aheadSig(from, seq, sig)
		return ProbeAhead, Effects{}
	}
	o, ok := f.ops.get(seq)
	switch {
	case !ok:
		mine, differ := f.finishedDiffers(seq, sig)
		if !differ {
			return ProbeNothing, Effects{}
		}
		me := &comm.MismatchError{Peer: f.Rank, Seq: seq, Local: sig, Remote: mine} // in the asker's words
		return ProbeNothing, Effects{Tell: []Tell{{To: from, Notice: mismatchNotice(seq, mine, me)}}}
	case !SigMatch(o.sig, sig):
		return ProbeNothing, f.Fail(seq, &comm.MismatchError{Peer: from, Seq: seq, Local: o.sig, Remote: sig}, true)
	}
	return ProbeRunning, Effects{}
}

// aheadFor is what peers said so far of collective seq, not started
// here; the caller stores it back. The notes are kept by value, so a
// frame that comes before its collective starts here (the common case of
// a small one) allocates nothing.
func (f *Failure) aheadFor(seq uint64) aheadNote {
	if a, ok := f.ahead.get(seq); ok {
		return a
	}
	return aheadNote{sigFrom: -1, otherFrom: -1}
}

func (f *Failure) aheadSig(from int, seq uint64, sig comm.Signature) {
	switch a := f.aheadFor(seq); {
	case a.sigFrom < 0:
		a.sigFrom, a.sig = from, sig
		f.ahead.set(seq, a)
	case a.otherFrom < 0 && !SigMatch(a.sig, sig):
		a.otherFrom, a.other = from, sig
		f.ahead.set(seq, a)
	}
}

// remoteFailure is this rank's error for collective seq (its call sig)
// from a peer's Notice n.
// A mismatch notice is a *comm.MismatchError with the peer's report: where the
// peer's call is this rank's own (its mismatch was with a third rank), the
// error says what the peer reported rather than two equal calls.
//
// The Notice of a peer whose communicator is aborted (Notice.Aborted)
// ends the collective with a *comm.AbortedError around the peer's error:
// that peer takes part in nothing again, so this communicator is aborted
// by it (abortAfter), and a collective it ends is ended by that abort —
// also one this rank started before the abort's news reached it.
func (f *Failure) remoteFailure(from int, n Notice, seq uint64, sig comm.Signature) error {
	if n.Code == FailMismatch {
		return &comm.MismatchError{Peer: from, Seq: seq, Local: sig, Remote: n.Sig, Reported: n.Reason}
	}
	if n.Aborted {
		return &comm.AbortedError{Cause: f.noticeError(from, n, "")}
	}
	return f.noticeError(from, n, "")
}

// noticeError is this rank's error for a peer's Notice n (other than of
// a mismatch at a collective this rank runs), prefix put before a reason
// that blames no rank.
func (f *Failure) noticeError(from int, n Notice, prefix string) error {
	rename := func(re *comm.RemoteError) *comm.RemoteError {
		if f.Rename != nil {
			return f.Rename(re)
		}
		return re
	}
	if n.Code != FailPeer || n.Culprit < 0 {
		return rename(n.Code.Remote(from, prefix+n.Reason))
	}
	b := comm.Blame{Rank: n.Culprit, Outside: n.Outside, How: n.Reason}
	re := rename(n.Code.Blamed(from, b, b.How))
	if b.Rank != f.Rank || b.Outside {
		return re
	}
	if f.GaveUp != nil {
		if err := f.GaveUp(from, re); err != nil {
			return err
		}
	}
	re.Reason = "its peers gave this rank up: " + re.Reason
	return re
}

// SigMatch compares two ranks' Signatures of one collective. AllToAllV's
// frames carry the element count for their receiver in Count, which the
// receiver checks against its own receive counts instead.
func SigMatch(a, b comm.Signature) bool {
	if a.Kind == comm.KindAllToAllV && b.Kind == comm.KindAllToAllV {
		a.Count, b.Count = 0, 0
	}
	return a == b
}
