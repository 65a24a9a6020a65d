package tier

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// A simulated world of Watches: ranks run a script of collectives, one of
// them maybe calling another kind at one collective (a mismatch whose
// calls never meet), ranks may die or be late, census answers may be
// lost, and a rank that got its error may close (it no longer answers; its
// announcement, if it made one, stands for it). Time is simulated: a seed
// is one whole run, milliseconds of real time. Every outcome is checked:
//
//   - with a mismatch at collective m and no death, every rank ends with a
//     *MismatchError for m, naming its own call there and a rank whose
//     call there really differs, within simBound of the last rank's start
//     of m; no rank completes m but for the ranks whose part only sends;
//   - with none, no rank gets a *MismatchError: every rank completes every
//     collective, or, with a rank dead, ends at its deadline naming it
//     (late or silent) and blaming no live rank for a mismatch.
//
// The model of the communicator around the Watch: a collective completes
// for every rank once all have started it with the same call; a rank
// marked as a pure sender of the mismatched collective completes it at
// once (the root of a Broadcast); a rank that aborts tells the others
// (its parts' news), and each that runs a collective then settles (asks
// until no rank is behind, and a while longer while one is silent) as the
// hierarchy does; a deadline asks once more and names the stragglers.

const (
	simTick     = 50 * time.Millisecond
	simAskAfter = 100 * time.Millisecond
	simDeadline = 10 * time.Second
	simBound    = 2 * time.Second
)

type simEvent struct {
	at   time.Duration
	seq  int // tie-break: order of scheduling
	rank int
	what func()
}

type simQueue []*simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(*simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simRank struct {
	w         Watch
	script    []comm.Signature // script[s-1]: the call of collective s
	cur       uint64           // the collective running, 0 between calls
	done      uint64           // the last collective completed
	startedAt map[uint64]time.Duration
	dead      bool
	closed    bool
	err       error
	errAt     time.Duration
	settling  bool
	sender    bool // its part of the mismatched collective only sends
}

type simWorld struct {
	t        *testing.T
	r        *rand.Rand
	now      time.Duration
	q        simQueue
	n        int
	ranks    []*simRank
	told     []*comm.Progress // announcements
	loss     float64
	mismatch uint64 // the mismatched collective, 0: none
	odd      int
	k        uint64 // collectives in the script
	dies     int    // the rank that dies, -1: none

	scheduled int
}

func (w *simWorld) at(d time.Duration, rank int, f func()) {
	w.scheduled++
	heap.Push(&w.q, &simEvent{at: w.now + d, seq: w.scheduled, rank: rank, what: f})
}

func (w *simWorld) clock() time.Time { return time.Unix(0, 0).Add(w.now) }

// census is what rank asks about collective seq: every other rank's
// Progress, as it stands now.
func (w *simWorld) census(rank int, seq uint64) ([]comm.Progress, []bool) {
	answers, answered := make([]comm.Progress, w.n), make([]bool, w.n)
	for q, sr := range w.ranks {
		switch {
		case q == rank:
			answers[q], answered[q] = sr.w.Progress(), true
		case sr.dead, sr.closed:
			if w.told[q] != nil {
				answers[q], answered[q] = *w.told[q], true
			}
		case sr.w.Progress().Started >= seq && w.r.Float64() < w.loss:
			// Lost: a live rank answers from its read loop at once, so
			// one that does not within the census's wait is stopped or
			// cut off. Not a rank still in a collective before the one
			// asked about (the verdict that its silence lets through
			// would fail that collective, which its stop fails anyway):
			// the Watch cannot tell, and the simulation leaves it out.
		default:
			answers[q], answered[q] = sr.w.Progress(), true
		}
	}
	return answers, answered
}

func (w *simWorld) fail(rank int, err error) {
	sr := w.ranks[rank]
	if sr.err != nil || sr.dead {
		return
	}
	sr.err, sr.errAt = err, w.now
	sr.cur = 0
	sr.w.Ended()
	if sr.w.Aborting(err) {
		p := sr.w.Progress()
		w.told[rank] = &p
	}
	// The parts tell the others; each that runs a collective settles.
	for q := range w.ranks {
		if q != rank {
			w.at(time.Duration(w.r.IntN(5))*time.Millisecond, q, func() { w.news(q, err) })
		}
	}
	if w.r.IntN(2) == 0 {
		w.at(time.Duration(w.r.IntN(20))*time.Millisecond, rank, func() { sr.closed = true })
	}
}

// news: a part told rank of a peer's abort with cause; a rank in a
// collective settles a mismatch, and asks where everyone is for any
// other failure (as at its deadline); one between calls meets it in its
// next.
func (w *simWorld) news(rank int, cause error) {
	sr := w.ranks[rank]
	if sr.dead || sr.err != nil || sr.settling || sr.cur == 0 {
		return
	}
	if !errors.Is(cause, comm.ErrMismatch) {
		w.deadline(rank, sr.cur)
		return
	}
	sr.settling = true
	w.settle(rank, sr.cur, 20*time.Millisecond, 0)
}

func (w *simWorld) settle(rank int, seq uint64, wait, silent time.Duration) {
	sr := w.ranks[rank]
	if sr.dead || sr.err != nil {
		return
	}
	answers, answered := w.census(rank, seq)
	v := sr.w.Answers(seq, answers, answered)
	switch {
	case v.Mismatch != nil:
		w.fail(rank, v.Mismatch)
		return
	case !v.Behind && (!v.Silent || silent >= 500*time.Millisecond):
		w.fail(rank, fmt.Errorf("a part's mismatch without the census's verdict: %w", comm.ErrMismatch))
		return
	}
	if !v.Behind {
		silent += wait
	}
	w.at(wait, rank, func() { w.settle(rank, seq, min(2*wait, 500*time.Millisecond), silent) })
}

func (w *simWorld) start(rank int) {
	sr := w.ranks[rank]
	if sr.dead || sr.err != nil || sr.done == w.k {
		return
	}
	s := sr.done + 1
	sr.cur = s
	sr.startedAt[s] = w.now
	sr.w.Started(s, sr.script[s-1])
	if s == w.mismatch && sr.sender {
		w.at(time.Millisecond, rank, func() { w.complete(rank, s) })
	}
	w.tryComplete(s)
	w.at(simDeadline, rank, func() { w.deadline(rank, s) })
}

// tryComplete completes collective s on every rank once all have started
// it with the same call.
func (w *simWorld) tryComplete(s uint64) {
	var first comm.Signature
	for i, sr := range w.ranks {
		c, ok := sr.w.progress.Call(s)
		if sr.dead || !ok || i > 0 && c != first {
			return
		}
		first = c
	}
	for q := range w.ranks {
		// A rank finishes its part in a few milliseconds, or now and then
		// in up to 600 (still in this collective while the others start
		// the next: a verdict on that one must wait for it).
		d := time.Duration(1+w.r.IntN(3)) * time.Millisecond
		if w.r.IntN(10) == 0 {
			d = time.Duration(100+w.r.IntN(500)) * time.Millisecond
		}
		w.at(d, q, func() { w.complete(q, s) })
	}
}

func (w *simWorld) complete(rank int, s uint64) {
	sr := w.ranks[rank]
	if sr.dead || sr.err != nil || sr.cur != s {
		return
	}
	sr.cur, sr.done = 0, s
	sr.w.Ended()
	w.at(time.Duration(w.r.IntN(30))*time.Millisecond, rank, func() { w.start(rank) })
}

func (w *simWorld) deadline(rank int, s uint64) {
	sr := w.ranks[rank]
	if sr.dead || sr.err != nil || sr.cur != s {
		return
	}
	answers, answered := w.census(rank, s)
	if v := sr.w.Answers(s, answers, answered); v.Mismatch != nil {
		w.fail(rank, v.Mismatch)
		return
	}
	late, last, silent := Stragglers(rank, s, answers, answered)
	w.fail(rank, &comm.LateError{Seq: s, Ranks: append(late, silent...), Last: last, Err: comm.ErrTimeout})
}

func (w *simWorld) tick(rank int) {
	sr := w.ranks[rank]
	if sr.dead || sr.closed {
		return
	}
	if sr.err == nil && sr.w.Tick(w.clock()) {
		seq := sr.w.Progress().Started
		answers, answered := w.census(rank, seq)
		v := sr.w.Answers(seq, answers, answered)
		if v.Mismatch != nil {
			w.fail(rank, v.Mismatch)
		}
	}
	w.at(simTick, rank, func() { w.tick(rank) })
}

func simCall(kind int, n int64) comm.Signature {
	switch kind {
	case 0:
		return comm.Signature{Kind: comm.KindAllReduce, DType: comm.F32, Op: comm.Sum, Root: -1, Count: n}
	case 1:
		return comm.Signature{Kind: comm.KindBroadcast, DType: comm.F32, Root: 0, Count: n}
	case 2:
		return comm.Signature{Kind: comm.KindBarrier, Root: -1}
	}
	return comm.Signature{Kind: comm.KindReduceScatter, DType: comm.F32, Op: comm.Sum, Root: -1, Count: n}
}

// simulate runs one seed and checks its outcome.
func simulate(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	n := 2 + r.IntN(7)
	w := &simWorld{t: t, r: r, n: n, k: uint64(3 + r.IntN(10)), dies: -1, loss: []float64{0, 0, 0.1, 0.3}[r.IntN(4)]}
	script := make([]comm.Signature, w.k)
	for i := range script {
		script[i] = simCall(r.IntN(4), int64(1+r.IntN(1000)))
	}
	switch r.IntN(4) {
	case 0, 1:
		// Not the last: a rank whose part only sent meets it in its next call.
		w.mismatch, w.odd = uint64(1+r.IntN(int(w.k)-1)), r.IntN(n)
	case 2:
		w.dies = r.IntN(n)
	}
	w.told = make([]*comm.Progress, n)
	for i := range n {
		sr := &simRank{script: append([]comm.Signature(nil), script...), startedAt: map[uint64]time.Duration{},
			w: Watch{Rank: i, AskAfter: simAskAfter, AskAtMost: simBound}}
		if w.mismatch != 0 && i == w.odd {
			odd := script[w.mismatch-1]
			for odd == script[w.mismatch-1] {
				odd = simCall(r.IntN(4), int64(1+r.IntN(1000)))
			}
			sr.script[w.mismatch-1] = odd
		}
		// A pure sender: never the odd rank, and never every other one
		// (a collective where no rank receives is none).
		sr.sender = i != w.odd && i != (w.odd+1)%n && r.IntN(4) == 0
		w.ranks = append(w.ranks, sr)
	}
	for i := range n {
		w.at(time.Duration(r.IntN(200))*time.Millisecond, i, func() { w.start(i) })
		w.at(time.Duration(r.IntN(int(simTick))), i, func() { w.tick(i) })
	}
	if w.dies >= 0 {
		w.at(time.Duration(r.IntN(500))*time.Millisecond, w.dies, func() { w.ranks[w.dies].dead = true })
	}
	for len(w.q) > 0 && w.now < 3*simDeadline {
		e := heap.Pop(&w.q).(*simEvent)
		w.now = e.at
		e.what()
	}
	w.check(seed)
}

func (w *simWorld) check(seed uint64) {
	t := w.t
	where := fmt.Sprintf("seed %d (%d ranks, %d collectives, mismatch at #%d on rank %d, rank %d dies, loss %.1f)",
		seed, w.n, w.k, w.mismatch, w.odd, w.dies, w.loss)
	var lastStart time.Duration
	for _, sr := range w.ranks {
		lastStart = max(lastStart, sr.startedAt[w.mismatch])
	}
	for i, sr := range w.ranks {
		if sr.dead {
			continue
		}
		var me *comm.MismatchError
		isMismatch := errors.As(sr.err, &me)
		switch {
		case w.mismatch == 0 && isMismatch:
			t.Errorf("%s: rank %d got a mismatch where every rank made the same calls: %v", where, i, sr.err)
		case w.mismatch == 0 && w.dies < 0 && (sr.err != nil || sr.done != w.k):
			t.Errorf("%s: rank %d completed %d of %d collectives, err %v; want all", where, i, sr.done, w.k, sr.err)
		case w.mismatch == 0 && w.dies >= 0 && sr.err != nil:
			var le *comm.LateError
			if !errors.As(sr.err, &le) || !contains(le.Ranks, w.dies) {
				t.Errorf("%s: rank %d ended with %v; want its deadline naming rank %d", where, i, sr.err, w.dies)
			}
		case w.mismatch != 0 && !isMismatch:
			t.Errorf("%s: rank %d ended with %v (done %d); want a *MismatchError for #%d", where, i, sr.err, sr.done, w.mismatch)
		case w.mismatch != 0 && (me.Seq != w.mismatch || me.Local != sr.script[w.mismatch-1]):
			t.Errorf("%s: rank %d: %v; want collective #%d, this rank's call %v", where, i, me, w.mismatch, sr.script[w.mismatch-1])
		case w.mismatch != 0 && me.Remote != w.ranks[me.Peer].script[w.mismatch-1] || w.mismatch != 0 && me.Remote == me.Local:
			t.Errorf("%s: rank %d: %v names rank %d's call as %v; it called %v", where, i, me, me.Peer, me.Remote, w.ranks[me.Peer].script[w.mismatch-1])
		case w.mismatch != 0 && sr.errAt-lastStart > simBound:
			t.Errorf("%s: rank %d got the mismatch %v after the last rank started #%d; want within %v", where, i, sr.errAt-lastStart, w.mismatch, simBound)
		}
	}
}

func contains(rs []int, r int) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// TestWatchSimulation runs HIERCOMM_SIM_SEEDS seeds (500 by default; make
// fuzz runs more) of the simulated world.
func TestWatchSimulation(t *testing.T) {
	seeds := 500
	if s, err := strconv.Atoi(os.Getenv("HIERCOMM_SIM_SEEDS")); err == nil && s > 0 {
		seeds = s
	}
	for seed := range uint64(seeds) {
		simulate(t, seed)
		if t.Failed() {
			return
		}
	}
}
