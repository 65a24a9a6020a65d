package tier

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// A simulated world of Failures (failure.go): N ranks (2 to 6), one
// Failure each, run a script of K collectives (3 to 8) over a network
// that delays and reorders every message and, with some seeds, loses
// some. Time is simulated (an event queue: simEvent and simQueue of
// watch_sim_test.go); a seed is one whole run, about a tenth of a
// millisecond of real time, and the same seed gives the same run.
//
// The model of the communicator around the Failure:
//
//   - A collective is an all-to-all exchange. At Start a rank sends one
//     data frame, its call's Signature, to every other rank; it completes
//     when it holds a kept frame (Frame's keep) of that collective from
//     every other rank, and then calls Finish. A frame that comes before
//     the rank starts the collective is held (Frame keeps it) and counts
//     once it starts it, as a transport keeps it. The one exception: in a
//     seed whose only fault is a mismatch, a few ranks (never the odd one)
//     only send in the mismatched collective (a Broadcast's root): each
//     completes it as soon as it has sent, so frames, notices and probes
//     of it meet a call finished there.
//   - A collective that an input's Effects ends is finished (Finish) with
//     that error: at once, or, with some seeds, up to fsimWake later (its
//     waiter wakes), so that what comes in between — frames, notices, its
//     deadline — meets a collective that has ended and is not finished
//     (Finish must still give the first failure). A call that Start
//     refuses (the communicator is aborted, or its context was canceled)
//     sends no data.
//   - Every Tell is sent: a notice to its rank, or to every other rank.
//     Every message — data frame, notice, probe, probe's answer — arrives
//     after a random delay (so messages reorder), or, with some seeds, is
//     lost: any message, or, with others, only data frames.
//   - A rank that has waited fsimProbeAfter in a collective probes every
//     peer whose frame it lacks (Probed there; the answer is only traced),
//     and again every fsimProbeAfter.
//   - Every collective has a deadline, fsimDeadline after its start: then
//     the rank calls Fail(seq, the context's error, true), and Finish.
//   - Now and then a rank is slow between calls, and one rank may be so
//     between every two (its peers' frames wait for it ahead).
//
// The faults a seed may inject (one, now and then two; loss besides):
//
//   - mismatch: one rank (the odd one) calls something else at
//     collective m;
//   - death: one rank stops (it handles and sends nothing more; what it
//     sent is on the wire); a detector tells each live rank after a
//     random delay: AbortFor(&PeerError{Peer: dead}) there;
//   - cancel: one rank's call at collective c is canceled before it
//     begins: Start(c, sig, ContextError(context.Canceled));
//   - deadline: one rank's deadline at collective d is a few
//     milliseconds, so it may pass before the frames come;
//   - stall: one rank starts collective d late, after its peers'
//     deadlines there.
//
// What every seed must show (fsimWorld.check; a failure prints the seed,
// what went wrong and the trace):
//
//  1. No rank waits forever: every live rank ends every call of its script
//     (well or not) within its deadline, and none is left waiting or
//     holding state (its Failure's ops and ahead notes are empty); the
//     queue runs empty. Without loss no rank waits to its deadline but
//     where a fault makes it: the short deadline, or the peers of the
//     stalled rank. With a mismatch alone and only data frames lost, no
//     rank waits to its deadline in the mismatched collective (the probes
//     find it) unless an earlier one failed.
//  2. Blame: an error that blames a rank (CulpritOf, not Outside) — a
//     collective's error or an abort's cause — names the rank that died,
//     never a live one. With the death alone and no loss, every error of
//     a live rank blames it, and every live rank ends aborted.
//  3. Mismatch: no rank sees ErrMismatch unless a rank called something
//     else, and every *MismatchError names collective m, this rank's call
//     there and the peer's as they were. A rank completes a collective
//     only with every peer's frame carrying its own call (the data of a
//     different call is never taken). With the mismatch alone and no
//     loss: every rank completes every collective before m; the odd rank
//     fails m; every error at or after m wraps ErrMismatch; a rank that
//     did not complete m reports a *MismatchError for m — or, not the odd
//     rank, the report of a peer whose call at m was its own (the
//     mismatch that peer saw was with a third rank's; Failure gives a
//     *RemoteError for such a notice, TestFailureMismatchFromOutside); no
//     rank completes a collective after m, and every rank ends aborted by
//     the mismatch.
//  4. The deadline rule: once a deadline or a cancel ended collective s
//     on some rank (EndedByDeadline), no rank completes a collective after
//     s (but a rank whose part only sends), and every live rank ends
//     aborted but one that completed s and every call after it (which,
//     all-to-all, only s being its last allows). Every live rank that
//     failed a call ends aborted (no failure in the model leaves the
//     communicator usable). With the cancel, the short deadline or the
//     stall alone and no loss, every collective before it completes and
//     every error wraps ErrCanceled or ErrTimeout. Without faults and
//     loss, every rank completes every collective and none is aborted.
//  5. Determinism: every fsimRerun-th seed is run twice, with the same
//     trace.

const (
	fsimHop        = 50 * time.Microsecond // the least delay of a message
	fsimDelay      = 5 * time.Millisecond  // the most delay beyond it
	fsimSlow       = 30 * time.Millisecond // the same, of one message in ten
	fsimProbeAfter = 100 * time.Millisecond
	fsimDeadline   = time.Second
	fsimDetect     = 50 * time.Millisecond // the detector's most delay
	fsimShort      = 4 * time.Millisecond  // the short deadline's most
	fsimLag        = 20 * time.Millisecond // the most a rank takes between calls
	fsimWake       = time.Millisecond      // the most a waiter takes to wake
	fsimRerun      = 8
	fsimMaxEvents  = 1 << 20
)

var errHeartbeat = errors.New("heartbeat stopped")

// fsimResult is how one rank's call of one collective went.
type fsimResult struct {
	started, ended bool
	startAt, endAt time.Duration
	err            error
	byDeadline     bool // this rank's own deadline ended it
}

type fsimRank struct {
	f       Failure
	script  []comm.Signature // script[s-1]: the call of collective s
	cur     uint64           // the collective running, 0 between calls
	done    uint64           // the last collective ended
	dead    bool
	sender  bool // its part of the mismatched collective only sends
	ending  bool // its collective has ended (End), not yet finished
	endErr  error
	held    [][]bool           // held[s][p]: a kept frame of collective s from p
	heldSig [][]comm.Signature // its Signature
	res     []fsimResult       // res[s]
}

// fsimStep is one line of a seed's trace.
type fsimStep struct {
	at    time.Duration
	rank  int
	what  string
	peer  int // -1: none
	seq   uint64
	err   error
	minor bool // a kept frame or a probe's answer: left out of a long trace
}

func (s fsimStep) String() string {
	b := fmt.Sprintf("%10.3fms rank %d: %s", float64(s.at)/float64(time.Millisecond), s.rank, s.what)
	if s.seq != 0 {
		b += fmt.Sprintf(" #%d", s.seq)
	}
	if s.peer >= 0 {
		b += fmt.Sprintf(" (peer %d)", s.peer)
	}
	if s.err != nil {
		b += ": " + s.err.Error()
	}
	return b
}

func (s fsimStep) same(o fsimStep) bool {
	if s.at != o.at || s.rank != o.rank || s.what != o.what || s.peer != o.peer || s.seq != o.seq || (s.err == nil) != (o.err == nil) {
		return false
	}
	return s.err == nil || s.err.Error() == o.err.Error()
}

type fsimWorld struct {
	seed      uint64
	r         *rand.Rand
	now       time.Duration
	q         simQueue
	scheduled int
	n         int
	k         uint64
	ranks     []*fsimRank
	loss      float64
	onlyData  bool // only data frames are lost
	wake      bool // a waiter calls Finish up to fsimWake after the End
	laggard   int  // a rank that is slow to start each call (-1: none)

	mismatch  uint64 // the mismatched collective (0: none), called otherwise by rank odd
	odd       int
	dies      int // the rank that dies (-1: none), at dieAt
	dieAt     time.Duration
	cancel    uint64 // the canceled call (0: none), of rank canceler
	canceler  int
	short     uint64 // the collective (0: none) where rank shortRank's deadline is shortLen
	shortRank int
	shortLen  time.Duration
	stall     uint64 // the collective (0: none) that rank staller starts late
	staller   int

	trace []fsimStep
	bad   []string // what went wrong while it ran
}

func (w *fsimWorld) at(d time.Duration, rank int, f func()) {
	w.scheduled++
	heap.Push(&w.q, &simEvent{at: w.now + d, seq: w.scheduled, rank: rank, what: f})
}

func (w *fsimWorld) step(rank int, what string, peer int, seq uint64, err error) {
	w.trace = append(w.trace, fsimStep{at: w.now, rank: rank, what: what, peer: peer, seq: seq, err: err})
}

func (w *fsimWorld) minor(rank int, what string, peer int, seq uint64) {
	w.trace = append(w.trace, fsimStep{at: w.now, rank: rank, what: what, peer: peer, seq: seq, minor: true})
}

func (w *fsimWorld) badf(format string, args ...any) {
	w.bad = append(w.bad, fmt.Sprintf("at %v: ", w.now)+fmt.Sprintf(format, args...))
}

// send delivers a message from rank from to rank to after a random delay,
// unless the network loses it.
func (w *fsimWorld) send(from, to int, what string, seq uint64, deliver func()) {
	if w.loss > 0 && (!w.onlyData || what == "frame") && w.r.Float64() < w.loss {
		w.step(from, "lost "+what, to, seq, nil)
		return
	}
	d := fsimDelay
	if w.r.IntN(10) == 0 {
		d = fsimSlow
	}
	w.at(fsimHop+time.Duration(w.r.Int64N(int64(d))), to, deliver)
}

// apply carries out rank i's Effects: the notices, then the ends.
func (w *fsimWorld) apply(i int, eff Effects) {
	sr := w.ranks[i]
	for _, t := range eff.Tell {
		if t.To == i || t.To < Everyone || t.To >= w.n {
			w.badf("rank %d told rank %d", i, t.To)
			continue
		}
		for p := range w.n {
			if p != i && (t.To == Everyone || t.To == p) {
				n := t.Notice
				w.send(i, p, "notice", n.Seq, func() { w.heard(p, i, n) })
			}
		}
	}
	if eff.Aborted != nil {
		w.step(i, "aborted", -1, 0, eff.Aborted)
	}
	for _, e := range eff.End {
		switch {
		case e.Seq != sr.cur || e.Seq == 0:
			w.badf("rank %d: End of #%d, which does not run here (#%d does)", i, e.Seq, sr.cur)
		case sr.ending:
			w.badf("rank %d: End of #%d again, with %v; it ended with %v", i, e.Seq, e.Err, sr.endErr)
		case w.wake:
			// The waiter wakes a little later: what comes in between meets
			// a collective that has ended and is not finished.
			sr.ending, sr.endErr = true, e.Err
			w.step(i, "ended", -1, e.Seq, e.Err)
			w.at(time.Duration(w.r.Int64N(int64(fsimWake))), i, func() {
				if !sr.dead {
					w.finish(i, e.Seq, e.Err)
				}
			})
		default:
			w.finish(i, e.Seq, e.Err)
		}
	}
}

// start starts rank i's next call.
func (w *fsimWorld) start(i int) {
	sr := w.ranks[i]
	s := sr.done + 1
	if sr.dead || sr.cur != 0 || s > w.k {
		return
	}
	sr.cur = s
	sr.res[s] = fsimResult{started: true, startAt: w.now}
	sig := sr.script[s-1]
	var refused error
	if s == w.cancel && i == w.canceler {
		refused = ContextError(context.Canceled)
	}
	w.step(i, "start", -1, s, refused)
	w.apply(i, sr.f.Start(s, sig, refused))
	if sr.cur != s || sr.ending {
		return // refused, or failed by what its peers said before
	}
	if refused != nil {
		w.badf("rank %d: Start(#%d) refused with %v did not end it", i, s, refused)
	}
	for p := range w.n {
		if p != i {
			w.send(i, p, "frame", s, func() { w.frame(p, i, s, sig) })
		}
	}
	if s == w.mismatch && sr.sender {
		w.finish(i, s, nil) // its part only sends
		return
	}
	d := fsimDeadline
	if s == w.short && i == w.shortRank {
		d = w.shortLen
	}
	w.at(d, i, func() { w.deadline(i, s) })
	w.at(fsimProbeAfter, i, func() { w.probe(i, s) })
	w.tryComplete(i)
}

// finish retires rank i's collective s, ended with err (nil: it completed).
func (w *fsimWorld) finish(i int, s uint64, ended error) {
	sr := w.ranks[i]
	eff, err := sr.f.Finish(s)
	if err != ended {
		w.badf("rank %d: Finish(#%d) returned %v; it ended with %v", i, s, err, ended)
	}
	res := &sr.res[s]
	res.ended, res.endAt, res.err = true, w.now, err
	sr.cur, sr.done, sr.ending, sr.endErr = 0, s, false, nil
	if err == nil && (s != w.mismatch || !sr.sender) {
		for p := range w.n {
			if p != i && !SigMatch(sr.heldSig[s][p], sr.script[s-1]) {
				w.badf("rank %d completed #%d, its call %v, with rank %d's frame of %v", i, s, sr.script[s-1], p, sr.heldSig[s][p])
			}
		}
	}
	w.step(i, "end", -1, s, err)
	w.apply(i, eff)
	if s < w.k {
		gap := time.Duration(w.r.Int64N(int64(2 * time.Millisecond)))
		if i == w.laggard || w.r.IntN(8) == 0 {
			gap = time.Duration(w.r.Int64N(int64(fsimLag)))
		}
		if s+1 == w.stall && i == w.staller {
			gap += fsimDeadline + fsimDeadline/5
		}
		w.at(gap, i, func() { w.start(i) })
	}
}

// tryComplete completes rank i's collective once it holds every peer's
// frame of it.
func (w *fsimWorld) tryComplete(i int) {
	sr := w.ranks[i]
	s := sr.cur
	if s == 0 || sr.ending {
		return
	}
	for p := range w.n {
		if p != i && !sr.held[s][p] {
			return
		}
	}
	w.finish(i, s, nil)
}

func (w *fsimWorld) frame(i, from int, seq uint64, sig comm.Signature) {
	sr := w.ranks[i]
	if sr.dead {
		return
	}
	keep, eff := sr.f.Frame(from, seq, sig)
	if keep {
		w.minor(i, "frame kept", from, seq)
		sr.held[seq][from], sr.heldSig[seq][from] = true, sig
	} else {
		w.step(i, "frame dropped", from, seq, nil)
	}
	w.apply(i, eff)
	if keep && sr.cur == seq {
		w.tryComplete(i)
	}
}

func (w *fsimWorld) heard(i, from int, n Notice) {
	sr := w.ranks[i]
	if sr.dead {
		return
	}
	w.step(i, fmt.Sprintf("heard a notice (%v, culprit %d)", n.Code, n.Culprit), from, n.Seq, nil)
	w.apply(i, sr.f.Heard(from, n))
}

func (w *fsimWorld) deadline(i int, s uint64) {
	sr := w.ranks[i]
	if sr.dead || sr.cur != s {
		return
	}
	err := ContextError(context.DeadlineExceeded)
	w.step(i, "deadline", -1, s, nil)
	if sr.ending {
		// Too late: the first failure stays.
		w.apply(i, sr.f.Fail(s, err, true))
		return
	}
	sr.res[s].byDeadline = true
	w.apply(i, sr.f.Fail(s, err, true))
	if sr.cur == s && !sr.ending {
		w.badf("rank %d: Fail(#%d) with its deadline did not end it", i, s)
		w.finish(i, s, sr.f.Err(s))
	}
}

func (w *fsimWorld) probe(i int, s uint64) {
	sr := w.ranks[i]
	if sr.dead || sr.cur != s || sr.ending {
		return
	}
	sig := sr.script[s-1]
	for p := range w.n {
		if p != i && !sr.held[s][p] {
			w.step(i, "probe", p, s, nil)
			w.send(i, p, "probe", s, func() { w.probed(p, i, s, sig) })
		}
	}
	w.at(fsimProbeAfter, i, func() { w.probe(i, s) })
}

func (w *fsimWorld) probed(i, from int, s uint64, sig comm.Signature) {
	sr := w.ranks[i]
	if sr.dead {
		return
	}
	ans, eff := sr.f.Probed(from, s, sig)
	w.step(i, fmt.Sprintf("probed, answers %d", ans), from, s, nil)
	w.apply(i, eff)
	w.send(i, from, "answer", s, func() {
		if !w.ranks[from].dead {
			w.minor(from, fmt.Sprintf("answer %d", ans), i, s)
		}
	})
}

func (w *fsimWorld) die() {
	sr := w.ranks[w.dies]
	sr.dead = true
	w.step(w.dies, "dies", -1, 0, nil)
	for q := range w.n {
		if q == w.dies {
			continue
		}
		w.at(time.Millisecond+time.Duration(w.r.Int64N(int64(fsimDetect))), q, func() {
			if !w.ranks[q].dead {
				w.step(q, "detector", w.dies, 0, nil)
				w.apply(q, w.ranks[q].f.AbortFor(&comm.PeerError{Peer: w.dies, Err: errHeartbeat}))
			}
		})
	}
}

// fsimNew makes seed's world, its faults drawn from the seed.
func fsimNew(seed uint64) *fsimWorld {
	r := rand.New(rand.NewPCG(seed, 0xfa11))
	w := &fsimWorld{seed: seed, r: r, n: 2 + r.IntN(5), k: uint64(3 + r.IntN(6)), dies: -1}
	w.laggard, w.wake = -1, r.IntN(2) == 0
	if r.IntN(2) == 0 {
		w.laggard = r.IntN(w.n)
	}
	if r.IntN(3) == 0 {
		w.loss, w.onlyData = []float64{0.02, 0.1, 0.3}[r.IntN(3)], r.IntN(2) == 0
	}
	script := make([]comm.Signature, w.k)
	for i := range script {
		script[i] = simCall(r.IntN(4), int64(1+r.IntN(1000)))
	}
	faults := []int{r.IntN(6)}
	if r.IntN(4) == 0 {
		faults = append(faults, 1+r.IntN(5))
	}
	for _, f := range faults {
		switch f {
		case 1:
			w.mismatch, w.odd = uint64(1+r.IntN(int(w.k))), r.IntN(w.n)
		case 2:
			w.dies, w.dieAt = r.IntN(w.n), time.Duration(r.Int64N(int64(w.k)*int64(4*time.Millisecond)))
		case 3:
			w.cancel, w.canceler = uint64(1+r.IntN(int(w.k))), r.IntN(w.n)
		case 4:
			w.short, w.shortRank, w.shortLen = uint64(1+r.IntN(int(w.k))), r.IntN(w.n), time.Duration(r.Int64N(int64(fsimShort)))
		case 5:
			w.stall, w.staller = uint64(1+r.IntN(int(w.k))), r.IntN(w.n)
		}
	}
	for i := range w.n {
		sr := &fsimRank{f: Failure{Rank: i}, script: append([]comm.Signature(nil), script...),
			held: make([][]bool, w.k+1), heldSig: make([][]comm.Signature, w.k+1), res: make([]fsimResult, w.k+1)}
		for s := range sr.held {
			sr.held[s], sr.heldSig[s] = make([]bool, w.n), make([]comm.Signature, w.n)
		}
		sr.sender = w.mismatch != 0 && len(faults) == 1 && i != w.odd && r.IntN(4) == 0
		if w.mismatch != 0 && i == w.odd {
			odd := script[w.mismatch-1]
			for odd == script[w.mismatch-1] {
				odd = simCall(r.IntN(4), int64(1+r.IntN(1000)))
			}
			sr.script[w.mismatch-1] = odd
		}
		w.ranks = append(w.ranks, sr)
	}
	return w
}

// run runs the world to its end: an empty queue.
func (w *fsimWorld) run() {
	for i := range w.n {
		gap := time.Duration(w.r.Int64N(int64(3 * time.Millisecond)))
		if w.stall == 1 && i == w.staller {
			gap += fsimDeadline + fsimDeadline/5
		}
		w.at(gap, i, func() { w.start(i) })
	}
	if w.dies >= 0 {
		w.at(w.dieAt, w.dies, w.die)
	}
	for events := 0; len(w.q) > 0; events++ {
		if events == fsimMaxEvents {
			w.badf("still running after %d events", events)
			return
		}
		e := heap.Pop(&w.q).(*simEvent)
		w.now = e.at
		e.what()
	}
}

func (w *fsimWorld) String() string {
	s := fmt.Sprintf("seed %d: %d ranks, %d collectives, loss %.2f", w.seed, w.n, w.k, w.loss)
	if w.onlyData {
		s += " (data frames only)"
	}
	if w.laggard >= 0 {
		s += fmt.Sprintf(", rank %d lags", w.laggard)
	}
	if w.wake {
		s += ", waiters wake late"
	}
	if w.mismatch != 0 {
		s += fmt.Sprintf(", rank %d calls %v at #%d", w.odd, w.ranks[w.odd].script[w.mismatch-1], w.mismatch)
		for i, sr := range w.ranks {
			if sr.sender {
				s += fmt.Sprintf(" (rank %d only sends)", i)
			}
		}
	}
	if w.dies >= 0 {
		s += fmt.Sprintf(", rank %d dies at %v", w.dies, w.dieAt)
	}
	if w.cancel != 0 {
		s += fmt.Sprintf(", rank %d cancels #%d", w.canceler, w.cancel)
	}
	if w.short != 0 {
		s += fmt.Sprintf(", rank %d's deadline at #%d is %v", w.shortRank, w.short, w.shortLen)
	}
	if w.stall != 0 {
		s += fmt.Sprintf(", rank %d starts #%d late", w.staller, w.stall)
	}
	return s
}

// traceText is the trace, each step a line; a long one without the kept
// frames and the probes' answers.
func (w *fsimWorld) traceText() string {
	var b strings.Builder
	long, lines := len(w.trace) > 200, 0
	for _, s := range w.trace {
		if long && s.minor {
			continue
		}
		if lines++; lines > 400 {
			b.WriteString("\t…\n")
			break
		}
		b.WriteString("\t" + s.String() + "\n")
	}
	return b.String()
}

// check checks the outcome of the run (the rules in the comment at the
// top) and says what went wrong.
func (w *fsimWorld) check() []string {
	bad := append([]string(nil), w.bad...)
	badf := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	faults := 0
	for _, f := range []bool{w.mismatch != 0, w.dies >= 0, w.cancel != 0, w.short != 0, w.stall != 0} {
		if f {
			faults++
		}
	}
	alone := faults == 1 && w.loss == 0 // one fault, no loss: the outcome is known
	m := w.mismatch
	// stopped is the first collective a deadline or a cancel ended on some
	// rank, failed the first collective some rank failed (0: none).
	var stopped, failed uint64
	for _, sr := range w.ranks {
		for s := uint64(1); s <= w.k; s++ {
			res := sr.res[s]
			if res.ended && comm.EndedByDeadline(res.err) && (stopped == 0 || s < stopped) {
				stopped = s
			}
			if res.ended && res.err != nil && (failed == 0 || s < failed) {
				failed = s
			}
		}
	}
	for i, sr := range w.ranks {
		// 2 and 3: what each error says, of every rank (the dead one's
		// before it died too).
		errs := []error{sr.f.AbortCause()}
		for s := uint64(1); s <= w.k; s++ {
			errs = append(errs, sr.res[s].err)
		}
		for _, err := range errs {
			if err == nil {
				continue
			}
			if b, ok := comm.CulpritOf(err); ok && !b.Outside && (b.Rank != w.dies || w.dies < 0) {
				badf("2: rank %d blames rank %d, which did not die: %v", i, b.Rank, err)
			}
			if m == 0 && errors.Is(err, comm.ErrMismatch) {
				badf("3: rank %d has a mismatch where every rank made the same calls: %v", i, err)
			}
			var me *comm.MismatchError
			if m != 0 && errors.As(err, &me) {
				switch {
				case me.Seq != m:
					badf("3: rank %d: %v; the calls differ at #%d", i, me, m)
				case me.Peer < 0 || me.Peer >= w.n || me.Peer == i:
					badf("3: rank %d: %v names peer %d", i, me, me.Peer)
				case me.Local.Kind != 0 && me.Local != sr.script[m-1]:
					badf("3: rank %d: %v; this rank called %v", i, me, sr.script[m-1])
				case me.Remote.Kind != 0 && me.Remote != w.ranks[me.Peer].script[m-1]:
					badf("3: rank %d: %v; rank %d called %v", i, me, me.Peer, w.ranks[me.Peer].script[m-1])
				}
			}
		}
		if sr.dead {
			continue
		}
		aborted := sr.f.AbortCause()
		// 1: every call ended within its deadline, and nothing is left.
		if sr.cur != 0 || sr.done != w.k {
			badf("1: rank %d ended %d of %d calls, still in #%d", i, sr.done, w.k, sr.cur)
		}
		if sr.f.ops.len() != 0 || sr.f.ahead.len() != 0 {
			badf("1: rank %d's Failure still holds %d collectives and %d notes ahead", i, sr.f.ops.len(), sr.f.ahead.len())
		}
		for s := uint64(1); s <= w.k; s++ {
			res := sr.res[s]
			limit := fsimDeadline
			if s == w.short && i == w.shortRank {
				limit = w.shortLen
			}
			if w.wake {
				limit += fsimWake
			}
			switch {
			case !res.ended:
				badf("1: rank %d never ended #%d", i, s)
			case res.endAt-res.startAt > limit:
				badf("1: rank %d ended #%d %v after its start; its deadline is %v", i, s, res.endAt-res.startAt, limit)
			case res.byDeadline && w.loss == 0 && !(s == w.short && i == w.shortRank) && !(w.stall != 0 && s >= w.stall && i != w.staller):
				badf("1: rank %d waited in #%d to its deadline, where no message was lost and no fault made it wait", i, s)
			case res.byDeadline && s == m && faults == 1 && w.onlyData && (failed == 0 || failed >= m):
				badf("1: rank %d waited in #%d, the mismatched collective, to its deadline; only data frames were lost, and the probes should have found it", i, s)
			}
		}
		// 2, with the death alone: every error blames the dead rank.
		if alone && w.dies >= 0 {
			for _, err := range errs {
				if b, ok := comm.CulpritOf(err); err != nil && (!errors.Is(err, comm.ErrPeerFailed) || !ok || b.Rank != w.dies) {
					badf("2: rank %d has %v; want rank %d's death", i, err, w.dies)
				}
			}
			if aborted == nil {
				badf("2: rank %d is not aborted, after rank %d died", i, w.dies)
			}
		}
		// 3, with the mismatch alone.
		if alone && m != 0 {
			for s := uint64(1); s <= w.k; s++ {
				err := sr.res[s].err
				var me *comm.MismatchError
				switch {
				case s < m && err != nil:
					badf("3: rank %d failed #%d, before the mismatch at #%d: %v", i, s, m, err)
				case s == m && i == w.odd && err == nil:
					badf("3: rank %d, the odd one, completed #%d", i, s)
				case s == m && err != nil && (!errors.As(err, &me) || me.Seq != m) && !w.report(i, err):
					badf("3: rank %d failed #%d with %v; want a *MismatchError for it", i, s, err)
				case s > m && err == nil:
					badf("3: rank %d completed #%d after the mismatch at #%d", i, s, m)
				case s > m && !errors.Is(err, comm.ErrMismatch):
					badf("3: rank %d failed #%d, after the mismatch at #%d, with %v; want ErrMismatch", i, s, m, err)
				}
			}
			if !errors.Is(aborted, comm.ErrMismatch) {
				badf("3: rank %d ends aborted by %v; want the mismatch", i, aborted)
			}
		}
		// 4: the deadline rule.
		for s := uint64(1); s <= w.k && aborted == nil; s++ {
			if sr.res[s].err != nil {
				badf("4: rank %d is not aborted, though #%d failed here: %v", i, s, sr.res[s].err)
				break
			}
		}
		if stopped != 0 {
			for s := stopped + 1; s <= w.k; s++ {
				if sr.res[s].ended && sr.res[s].err == nil && (s != m || !sr.sender) {
					badf("4: rank %d completed #%d, after a deadline or cancel ended #%d", i, s, stopped)
				}
			}
			all := true
			for s := stopped; s <= w.k; s++ {
				all = all && sr.res[s].ended && sr.res[s].err == nil
			}
			if aborted == nil && !all {
				badf("4: rank %d is not aborted, after a deadline or cancel ended #%d", i, stopped)
			}
		}
		if at, kind := max(w.cancel, w.short, w.stall), comm.ErrCanceled; alone && at != 0 {
			if w.cancel == 0 {
				kind = comm.ErrTimeout
			}
			for s := uint64(1); s <= w.k; s++ {
				err := sr.res[s].err
				switch {
				case s < at && err != nil:
					badf("4: rank %d failed #%d, before the fault at #%d: %v", i, s, at, err)
				case s >= at && err != nil && !errors.Is(err, kind):
					badf("4: rank %d failed #%d with %v; want %v", i, s, err, kind)
				case s >= at && err == nil && w.short == 0:
					badf("4: rank %d completed #%d; the fault at #%d lets none complete it", i, s, at)
				}
			}
		}
		if faults == 0 && w.loss == 0 {
			for s := uint64(1); s <= w.k; s++ {
				if err := sr.res[s].err; err != nil {
					badf("4: rank %d failed #%d without a fault: %v", i, s, err)
				}
			}
			if aborted != nil {
				badf("4: rank %d is aborted without a fault: %v", i, aborted)
			}
		}
	}
	return bad
}

// report reports whether err, rank i's error at the mismatched
// collective, is a peer's report of it that Failure gives instead of a
// *MismatchError (remoteFailure): a *RemoteError with Mismatch from a peer
// whose call there was rank i's own (the mismatch it saw was with a third
// rank's). Never the odd rank's: every peer's call differs from its own.
func (w *fsimWorld) report(i int, err error) bool {
	var re *comm.RemoteError
	m := w.mismatch
	return i != w.odd && errors.As(err, &re) && re.Mismatch && re.Peer >= 0 && re.Peer < w.n &&
		w.ranks[re.Peer].script[m-1] == w.ranks[i].script[m-1]
}

// fsimSeeds is HIERCOMM_SIM_SEEDS, the number of seeds a simulated world
// runs (def by default).
func fsimSeeds(def int) int {
	if s, err := strconv.Atoi(os.Getenv("HIERCOMM_SIM_SEEDS")); err == nil && s > 0 {
		return s
	}
	return def
}

// TestFailureSimulation runs HIERCOMM_SIM_SEEDS seeds (500 by default;
// make fuzz runs more) of the simulated world of Failures.
func TestFailureSimulation(t *testing.T) {
	seeds := fsimSeeds(500)
	for seed := range uint64(seeds) {
		w := fsimNew(seed)
		w.run()
		if bad := w.check(); len(bad) > 0 {
			t.Fatalf("%v:\n%s\ntrace:\n%s", w, strings.Join(bad, "\n"), w.traceText())
		}
		if seed%fsimRerun == 0 {
			again := fsimNew(seed)
			again.run()
			for j := range max(len(w.trace), len(again.trace)) {
				if j >= len(w.trace) || j >= len(again.trace) || !w.trace[j].same(again.trace[j]) {
					t.Fatalf("%v: run twice, its trace differs at step %d:\nfirst:\n%s\nagain:\n%s", w, j, w.traceText(), again.traceText())
				}
			}
		}
	}
}
