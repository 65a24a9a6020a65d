package hierarchy

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/schedule"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// The census (comm.Control's census on the world part) is how the hierarchy
// finds what no part can see. Its collectives take different routes, so
// ranks that disagree on a call's kind may never meet in a part: rank 3's
// small Broadcast waits in the world part for the root, the root waits in
// its node for rank 1, rank 1 on its rail for rank 2, and rank 2 in its
// node for rank 3. A rank whose collective has run longer than it should
// (stallAfter: a small multiple of the cost model's time for it, not the
// deadline) asks every rank where it stands, and tier.Judge compares the
// answers with its own calls: a disagreement aborts the hierarchy with a
// *comm.MismatchError of the users' calls, which every part tells its
// peers, and every rank that waits asks too. A part's own mismatch, and a
// deadline, ask the same way, so the error names the first collective at
// which the calls differ and both calls, whichever part saw it first.

const (
	// censusWait bounds a census: every live rank answers at once from
	// its read loop, so only a rank that is stopped or cut off makes the
	// census last this long.
	censusWait = 500 * time.Millisecond
	// DefaultAskAfter is Config.AskAfter's default: the least time a
	// collective runs before this rank asks where every rank stands.
	DefaultAskAfter = 100 * time.Millisecond
	// askAtMost is the longest time between the censuses of a collective
	// that keeps waiting (each waits twice the one before, up to this).
	askAtMost = 2 * time.Second
)

// standing is what this rank answers a census: where it stands. It is
// called on the world part's read loop.
func (h *Comm) standing() comm.Progress {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stall.Progress()
}

// take takes a census: the answers that came within censusWait. ok is
// false when the world part cannot ask for this hierarchy.
func (h *Comm) take() (answers []comm.Progress, answered []bool, ok bool) {
	if h.census == nil {
		return nil, nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), censusWait)
	defer cancel()
	answers, answered = h.census.Progress(ctx)
	return answers, answered, true
}

// ask takes a census about collective seq and hands the answers to the
// Watch. ok is false when the world part cannot ask for this hierarchy.
func (h *Comm) ask(seq uint64) (v tier.Verdict, answers []comm.Progress, answered []bool, ok bool) {
	answers, answered, ok = h.take()
	if !ok {
		return v, nil, nil, false
	}
	h.mu.Lock()
	v = h.stall.Answers(seq, answers, answered)
	h.mu.Unlock()
	return v, answers, answered, true
}

// verdict is the mismatch that kept collective seq from completing, as
// the census finds it, or nil if the ranks' calls agree as far as they
// answered (or a rank has not reached it yet). A verdict once found
// stands: every later error of the hierarchy reports it.
func (h *Comm) verdict(seq uint64) *comm.MismatchError {
	h.mu.Lock()
	found := h.stall.Found()
	h.mu.Unlock()
	if found != nil {
		return found
	}
	v, _, _, _ := h.ask(seq)
	return v.Mismatch
}

// askOnce reports whether this is the first call since an abort by a
// part's mismatch: only that one asks the census (a rank that has closed
// makes a census wait censusWait, and an aborted communicator fails its
// calls at once).
func (h *Comm) askOnce() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	first := !h.asked
	h.asked = true
	return first
}

// settle is the census's verdict on collective seq, which this rank's part
// found mismatched, once every rank has started it: the part's news may
// come while other ranks are still in an earlier collective, one that
// every rank called alike, and aborting the hierarchy now would fail it
// on them. So it asks until they have (20 ms apart, doubling up to
// censusWait), or a verdict comes, or ctx ends; and for up to censusWait
// while a rank does not answer (the odd rank may have closed on its own
// error, its announcement on the way). Nil without a verdict.
func (h *Comm) settle(ctx context.Context, seq uint64) *comm.MismatchError {
	var silent time.Duration
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, censusWait) {
		v, _, _, ok := h.ask(seq)
		if v.Mismatch != nil || !ok || !v.Behind && (!v.Silent || silent >= censusWait) {
			return v.Mismatch
		}
		if !v.Behind {
			silent += wait
		}
		select {
		case <-ctx.Done():
			return nil
		case <-h.stop:
			return nil
		case <-time.After(wait):
		}
	}
}

// askWhere asks every rank, over the world part, where it stands, and
// returns the mismatch that kept collective seq apart, if the answers
// show one; else the deadline error (this rank's, or a peer's that
// reached it) of seq naming, by global rank, the ranks that had not
// started it, and the ranks that did not answer in censusWait. It returns
// neither when the world part cannot ask for this hierarchy, or when
// every rank answered and had started seq (then the part's own deadline
// error says the most: part, its *comm.LateError if it named ranks, else
// wrapped).
func (h *Comm) askWhere(seq uint64, kind comm.Kind, part *comm.LateError, wrapped error) (*comm.MismatchError, *comm.LateError) {
	v, answers, answered, ok := h.ask(seq)
	switch {
	case !ok:
		return nil, nil
	case v.Mismatch != nil:
		return v.Mismatch, nil
	}
	base := wrapped
	if part != nil {
		base = part.Err
	}
	g := &comm.LateError{Err: base, Seq: seq, What: fmt.Sprintf("this %v #%d", kind, seq)}
	late, last, silent := tier.Stragglers(h.rank, seq, answers[:min(len(answers), h.size)], answered)
	for i, r := range late {
		g.Ranks = append(g.Ranks, r)
		g.Last = append(g.Last, last[i])
		g.Who = append(g.Who, fmt.Sprintf("rank %d (%s)", r, h.where(r)))
	}
	if len(silent) > 0 {
		g.Silent = silent
		who := make([]string, len(silent))
		for i, r := range silent {
			who[i] = fmt.Sprintf("rank %d (%s)", r, h.where(r))
		}
		g.Err = fmt.Errorf("%w; %s did not say within %v which collective they were at (stopped, cut off, closed, or not yet in this communicator)", g.Err, strings.Join(who, ", "), censusWait)
	}
	if len(g.Ranks) == 0 && len(silent) == 0 {
		return nil, nil
	}
	if len(g.Ranks) == 0 && part != nil {
		// The part named the ranks that had not started its operation;
		// one whose answer shows that it had started this collective
		// was waiting in another part, and is no straggler (a silent
		// rank may be).
		var named []int
		var last []uint64
		var who []string
		for i, r := range part.Ranks {
			if r >= 0 && r < len(answered) && answered[r] && answers[r].Started >= seq {
				continue
			}
			named = append(named, r)
			if i < len(part.Last) {
				last = append(last, part.Last[i])
			}
			if i < len(part.Who) {
				who = append(who, part.Who[i])
			}
		}
		if len(named) > 0 {
			part.Ranks, part.Last, part.Who = named, last, who
			part.Err, part.Silent = g.Err, g.Silent
			return nil, part
		}
	}
	return nil, g
}

// watchStalls asks the census about a collective (or Split) that has run
// for its time (tier.Watch.Tick: Config.AskAfter plus stallAfter), and
// again after twice as long each time (up to askAtMost) while it keeps
// waiting; a mismatch found aborts the hierarchy with it, which ends the
// phases waiting here and, through the parts, on the peers. It looks every
// tick, without a clock read or a timer on the collectives' path, and
// runs until Close.
func (h *Comm) watchStalls(tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		var now time.Time
		select {
		case <-h.stop:
			return
		case now = <-t.C:
		}
		h.mu.Lock()
		due := h.failure.AbortCause() == nil && h.stall.Tick(now)
		cur := h.stall.Progress().Started
		h.mu.Unlock()
		if !due {
			continue
		}
		if v, _, _, _ := h.ask(cur); v.Mismatch != nil {
			h.log.Debug("hierarchy: the census found a mismatch", "comm", h.cfg.Name, "rank", h.rank, "err", v.Mismatch)
			h.abort(v.Mismatch)
		}
	}
}

// stallAfter is how long collective call may run, beyond Config.AskAfter,
// before this rank asks where every rank stands (tier.Watch.Expect): four
// times the cost model's time for an AllReduce of its largest buffer (the
// model's slowest shape for those bytes; a census costs a control message
// to every rank, so asking early costs little).
func (h *Comm) stallAfter(call comm.Signature) time.Duration {
	bytes := max(call.Count, 0) * int64(call.DType.Size())
	switch call.Kind {
	case comm.KindAllGather, comm.KindGather, comm.KindReduceScatter, comm.KindScatter:
		bytes *= int64(h.size)
	}
	est := h.cfg.Cost.Estimate(schedule.AllReduceOp, schedule.TwoD, int(min(bytes, 1<<50)), max(h.g, 1), h.topo.NumNodes())
	return time.Duration(4 * est * float64(time.Second))
}
