package nexar

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// The progress census (comm.Control): a communicator composed on
// this one (a hierarchy on its world part) installs what this rank
// answers — how far its own collectives have got and the user's calls of
// the latest ones (comm.Progress) — and asks every rank for its answer
// when one of its collectives has waited too long (a mismatch of calls
// that took different routes, tier.Judge) or passes its deadline (so the
// error names the ranks that had not started it, however many parts away
// the waiting rank stood from them). Every rank's read loop answers, also
// outside any collective: a rank that is alive answers, one that is
// stopped or cut off does not. The answer travels as the reply's payload,
// in tier.AppendProgress's form.

// census is a Comm's side of the progress census. Its zero value is
// ready.
type census struct {
	report atomic.Pointer[func() comm.Progress] // what this rank answers; nil: nothing installed

	mu     sync.Mutex // guards next, asking and the queries in it, and told
	next   uint64
	asking map[uint64]*progressQuery
	// told holds the Progress that peers announced (Announce), by rank:
	// their answer once they no longer answer.
	told map[int]comm.Progress
}

// progressQuery is one Progress call waiting for its answers.
type progressQuery struct {
	answers  []comm.Progress
	answered []bool
	heard    []bool // replied, with an answer or without
	missing  int
	done     chan struct{} // closed when missing reaches 0
}

// SetProgress implements comm.Control: f is what this rank
// answers a census (the composed communicator's comm.Progress), unless
// another is installed. It is called on a transport's read loop and must
// not block.
func (c *Comm) SetProgress(f func() comm.Progress) (remove func(), ok bool) {
	p := &f
	if !c.census.report.CompareAndSwap(nil, p) {
		return func() {}, false
	}
	return func() { c.census.report.CompareAndSwap(p, nil) }, true
}

// Progress implements comm.Control: it asks every other rank for
// its answer, and returns what arrived when all have answered or ctx
// ends. A rank that announced its Progress (Announce) is not asked: its
// announcement is its answer. A rank with nothing installed, or one that
// did not answer in time (stopped, its network cut, its transport down),
// has answered[r] false; this rank answers itself.
func (c *Comm) Progress(ctx context.Context) (answers []comm.Progress, answered []bool) {
	P := c.Size()
	q := &progressQuery{answers: make([]comm.Progress, P), answered: make([]bool, P), heard: make([]bool, P), done: make(chan struct{})}
	if f := c.census.report.Load(); f != nil {
		q.answers[c.rank], q.answered[c.rank] = (*f)(), true
	}
	b := &c.census
	b.mu.Lock()
	var peers []int
	for p, wr := range c.members {
		if _, told := b.told[p]; p == c.rank || told {
			continue // an announcement is final: nothing to wait for
		}
		if _, dead := c.w.peerState(wr); dead == nil {
			peers = append(peers, p)
		}
	}
	q.missing = len(peers)
	b.next++
	id := b.next
	if b.asking == nil {
		b.asking = map[uint64]*progressQuery{}
	}
	b.asking[id] = q
	b.mu.Unlock()
	for _, p := range peers {
		c.notifyLater(p, transport.Header{Kind: transport.FrameProgress, Comm: c.id, Seq: id}, nil)
	}
	if len(peers) == 0 {
		close(q.done)
	}
	select {
	case <-q.done:
	case <-ctx.Done():
	case <-c.done:
	}
	b.mu.Lock()
	delete(b.asking, id) // no reply touches q from here on
	for r, p := range b.told {
		if !q.answered[r] {
			q.answers[r], q.answered[r] = p, true
		}
	}
	b.mu.Unlock()
	return q.answers, q.answered
}

// Announce implements comm.Control: p goes to every live rank as a
// census reply to no query (id 0; queries count from 1), which it keeps.
func (c *Comm) Announce(p comm.Progress) {
	answer := tier.AppendProgress(nil, p)
	for q, wr := range c.members {
		if q == c.rank {
			continue
		}
		if _, dead := c.w.peerState(wr); dead == nil {
			c.notifyLater(q, transport.Header{Kind: transport.FrameProgressReply, Comm: c.id}, answer)
		}
	}
}

// onProgress answers a census query from f.src.
func (c *Comm) onProgress(f frame) {
	transport.PutBuf(f.payload)
	var answer []byte // none: nothing installed here
	if r := c.census.report.Load(); r != nil {
		answer = tier.AppendProgress(nil, (*r)())
	}
	c.notifyLater(f.src, transport.Header{Kind: transport.FrameProgressReply, Comm: c.id, Seq: f.h.Seq}, answer)
}

// onProgressReply keeps an answer to this rank's census, or a peer's
// announcement (id 0). A reply to no query in progress or a repeated one
// is dropped; one without an answer (no payload: nothing installed there)
// or with a malformed one counts as heard.
func (c *Comm) onProgressReply(f frame) {
	defer transport.PutBuf(f.payload)
	b := &c.census
	b.mu.Lock()
	defer b.mu.Unlock()
	if f.h.Seq == 0 {
		if p, err := tier.DecodeProgress(f.payload); err == nil && f.src != c.rank {
			if b.told == nil {
				b.told = map[int]comm.Progress{}
			}
			b.told[f.src] = p
		}
		return
	}
	q := b.asking[f.h.Seq]
	if q == nil || f.src == c.rank || q.heard[f.src] {
		return
	}
	q.heard[f.src] = true
	if len(f.payload) > 0 {
		if p, err := tier.DecodeProgress(f.payload); err == nil {
			q.answers[f.src], q.answered[f.src] = p, true
		}
	}
	if q.missing--; q.missing == 0 {
		close(q.done)
	}
}
