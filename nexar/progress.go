package nexar

import (
	"context"
	"sync"
	"sync/atomic"
)

// The progress census (comm.ProgressCensus): a communicator composed on
// this one (a hierarchy on its world part) installs what this rank
// answers — how far its own collectives have got — and asks every rank
// for its answer when one of its collectives passes its deadline, so the
// error names the ranks that had not started it, however many parts away
// the waiting rank stood from them. Every rank's read loop answers, also
// outside any collective: a rank that is alive answers, one that is
// stopped or cut off does not.

// census is a Comm's side of the progress census. Its zero value is
// ready.
type census struct {
	report atomic.Pointer[func() uint64] // what this rank answers; nil: nothing installed

	mu     sync.Mutex // guards next, asking and the queries in it
	next   uint64
	asking map[uint64]*progressQuery
}

// progressQuery is one Progress call waiting for its answers.
type progressQuery struct {
	last     []uint64
	answered []bool
	heard    []bool // replied, with an answer or without
	missing  int
	done     chan struct{} // closed when missing reaches 0
}

// SetProgress implements comm.ProgressCensus: f is what this rank
// answers a census (the composed communicator's last started collective),
// unless another is installed. It is called on a transport's read loop
// and must not block.
func (c *Comm) SetProgress(f func() uint64) (remove func(), ok bool) {
	p := &f
	if !c.census.report.CompareAndSwap(nil, p) {
		return func() {}, false
	}
	return func() { c.census.report.CompareAndSwap(p, nil) }, true
}

// Progress implements comm.ProgressCensus: it asks every other rank for
// its answer, and returns what arrived when all have answered or ctx
// ends. A rank with nothing installed, or one that did not answer in
// time (stopped, its network cut, its transport down), has answered[r]
// false; this rank answers itself.
func (c *Comm) Progress(ctx context.Context) (last []uint64, answered []bool) {
	P := c.Size()
	q := &progressQuery{last: make([]uint64, P), answered: make([]bool, P), heard: make([]bool, P), done: make(chan struct{})}
	if f := c.census.report.Load(); f != nil {
		q.last[c.rank], q.answered[c.rank] = (*f)(), true
	}
	var peers []int
	for p, wr := range c.members {
		if p == c.rank {
			continue
		}
		if _, dead := c.w.peerState(wr); dead == nil {
			peers = append(peers, p)
		}
	}
	if len(peers) == 0 {
		return q.last, q.answered
	}
	q.missing = len(peers)
	b := &c.census
	b.mu.Lock()
	b.next++
	id := b.next
	if b.asking == nil {
		b.asking = map[uint64]*progressQuery{}
	}
	b.asking[id] = q
	b.mu.Unlock()
	for _, p := range peers {
		c.notifyLater(p, Header{Kind: FrameProgress, Comm: c.id, Seq: id}, nil)
	}
	select {
	case <-q.done:
	case <-ctx.Done():
	case <-c.done:
	}
	b.mu.Lock()
	delete(b.asking, id) // no reply touches q from here on
	b.mu.Unlock()
	return q.last, q.answered
}

// onProgress answers a census query from f.src.
func (c *Comm) onProgress(f frame) {
	putBuf(f.payload)
	h := Header{Kind: FrameProgressReply, Comm: c.id, Seq: f.h.Seq}
	if r := c.census.report.Load(); r != nil {
		h.Sig.Root = 1
		h.Sig.Count = int64(min((*r)(), 1<<63-1))
	}
	c.notifyLater(f.src, h, nil)
}

// onProgressReply keeps an answer to this rank's census. A reply to no
// query in progress or a repeated one is dropped; one without an answer
// (Sig.Root 0: nothing installed there) counts as heard.
func (c *Comm) onProgressReply(f frame) {
	putBuf(f.payload)
	b := &c.census
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.asking[f.h.Seq]
	if q == nil || f.src == c.rank || q.heard[f.src] {
		return
	}
	q.heard[f.src] = true
	if f.h.Sig.Root == 1 && f.h.Sig.Count >= 0 {
		q.last[f.src], q.answered[f.src] = uint64(f.h.Sig.Count), true
	}
	if q.missing--; q.missing == 0 {
		close(q.done)
	}
}
