package shm

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// Failure detection. A peer has failed when its process is gone (no such
// pid, a zombie, or a pid reused by another process: see processGone) or
// when its heartbeat word has not moved for FailureTimeout (a hung
// process, one in another pid namespace, or a rank "killed" in process by
// a test). Every rank bumps its heartbeat from a goroutine of its own, so a
// rank that is merely busy or slow to call is not failed.
//
// A rank that gives up on the communicator says so in its control block
// (state closed or aborted, with an abort record): peers see that at once,
// without waiting for a timeout.

// heartbeatEvery is how often a rank bumps its heartbeat.
func (c *Comm) heartbeatEvery() time.Duration {
	return min(max(c.cfg.FailureTimeout/5, time.Millisecond), time.Second)
}

// livenessEvery is how often a waiter checks processes and heartbeats.
func (c *Comm) livenessEvery() time.Duration {
	return min(max(c.cfg.FailureTimeout/8, time.Millisecond), 50*time.Millisecond)
}

func (c *Comm) heartbeat(stop <-chan struct{}) {
	defer c.users.Done()
	t := time.NewTicker(c.heartbeatEvery())
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if c.killed.Load() {
				return
			}
			atomic.AddUint64(c.mine.heartbeat, 1)
			c.stalls.note(time.Now())
		}
	}
}

// watch is one waiter's view of its peers' heartbeats: the value it last
// saw and when (on its own clock) that value changed. Waiters (the
// executor, the point-to-point engine) each own one.
type watch struct {
	hb    []uint64
	since []time.Time
	next  time.Time
}

func newWatch(P int) *watch {
	w := &watch{hb: make([]uint64, P), since: make([]time.Time, P)}
	now := time.Now()
	for i := range w.since {
		w.since[i] = now
	}
	return w
}

// due reports whether a liveness check is due, and if so schedules the next.
func (c *Comm) due(w *watch, now time.Time) bool {
	if now.Before(w.next) {
		return false
	}
	w.next = now.Add(c.livenessEvery())
	return true
}

// checkPeer returns a *comm.PeerError if peer q has failed.
func (c *Comm) checkPeer(w *watch, q int, now time.Time) error {
	hb := atomic.LoadUint64(c.words[q].heartbeat)
	if hb != w.hb[q] {
		w.hb[q], w.since[q] = hb, now
	} else if d := now.Sub(w.since[q]); d > c.cfg.FailureTimeout {
		return &comm.PeerError{Peer: q, Err: fmt.Errorf("its heartbeat stopped %v ago (FailureTimeout %v): the process is hung or gone",
			d.Round(time.Millisecond), c.cfg.FailureTimeout)}
	}
	p := readProc(c.seg.mem, c.seg.l.ctl(q)+cProc)
	if p.pid != c.me.pid && processGone(p) {
		return &comm.PeerError{Peer: q, Err: fmt.Errorf("its process (pid %d) is gone", p.pid)}
	}
	return nil
}

// peerState returns the error that peer q's state means, or nil while q
// is attached.
func (c *Comm) peerState(q int) error {
	switch atomic.LoadUint32(c.words[q].state) {
	case stateAttached:
		return nil
	case stateClosed:
		return &comm.PeerError{Peer: q, Err: errors.New("it closed its communicator")}
	case stateAborted:
		return c.abortError(q)
	}
	return &comm.PeerError{Peer: q, Err: errors.New("it is not attached")}
}

// writeAbort publishes this rank's abort record and state, and wakes every
// waiter of the segment so that none sleeps through it. A peer failure
// that cause blames on a rank (comm.CulpritOf) records that rank, whether
// it is numbered by a composed communicator that aborted this one
// (tier.FromOutside), and what happened to it.
func (c *Comm) writeAbort(cause error) {
	mem, base := c.seg.mem, c.seg.l.ctl(c.rank)+cAbort
	note := tier.NoticeOf(0, comm.Signature{}, cause) // the failure machine's notice, as the record holds it
	peer, flags, text, code := int32(note.Culprit), uint32(0), note.Reason, note.Code
	if note.Outside {
		flags |= abortOutside
	}
	n := copy(mem[base+aText:base+aText+abortText], text)
	atomic.StoreUint32(u32At(mem, base+aCode), uint32(code))
	atomic.StoreUint32(u32At(mem, base+aPeer), uint32(peer))
	atomic.StoreUint32(u32At(mem, base+aLen), uint32(n))
	posted := atomic.LoadUint64(c.mine.posted)
	if c.passed.Load() == posted {
		flags |= abortPassed
	}
	atomic.StoreUint32(u32At(mem, base+aFlags), flags)
	atomic.StoreUint64(u64At(mem, base+aStep), posted)
	atomic.StoreUint64(u64At(mem, base+aTime), uint64(time.Now().UnixNano()))
	c.setState(stateAborted)
}

// setState publishes this rank's state and wakes every waiter.
func (c *Comm) setState(st uint32) {
	atomic.StoreUint32(c.mine.state, st)
	atomic.AddUint32(c.mine.bell, 1)
	atomic.AddUint32(c.mine.p2pBell, 1)
	for q := range c.size {
		futexWakeAll(c.words[q].bell)
		futexWakeAll(c.words[q].p2pBell)
	}
}

// abortedAt is the last step peer q posted before it aborted, if it has.
func (c *Comm) abortedAt(q int) (uint64, bool) {
	if atomic.LoadUint32(c.words[q].state) != stateAborted {
		return 0, false
	}
	return atomic.LoadUint64(u64At(c.seg.mem, c.seg.l.ctl(q)+cAbort+aStep)), true
}

// abortError turns peer q's abort record into this rank's error: a peer
// failure it saw is that failure (naming the failed rank; this rank
// itself when q gave it up: expelled), anything else is q abandoning the
// collective.
func (c *Comm) abortError(q int) error {
	mem, base := c.seg.mem, c.seg.l.ctl(q)+cAbort
	code := tier.FailCode(atomic.LoadUint32(u32At(mem, base+aCode)))
	peer := int(int32(atomic.LoadUint32(u32At(mem, base+aPeer))))
	outside := atomic.LoadUint32(u32At(mem, base+aFlags))&abortOutside != 0
	n := min(int(atomic.LoadUint32(u32At(mem, base+aLen))), abortText)
	text := string(mem[base+aText : base+aText+n])
	switch {
	case code != tier.FailPeer || peer < 0:
	case peer == c.rank && !outside, peer == c.job && outside && c.cfg.Ranks != nil:
		// q gave this rank up (or the composer that aborted q blames
		// this process, by its job rank).
		return c.expelled(q, text, int64(atomic.LoadUint64(u64At(mem, base+aTime))))
	case outside:
		return c.named(code.Blamed(q, comm.Blame{Rank: peer, Outside: true, How: text}, text))
	case peer < c.size && peer != c.rank:
		return &comm.PeerError{Peer: peer, Err: &comm.ViaError{How: text, Via: fmt.Sprintf("seen by rank %d", q)}}
	}
	return c.named(code.Remote(q, "it aborted the communicator: "+text))
}

// named is re, news from rank re.Peer of this communicator, naming it by
// its job rank where Config.Ranks says it (RemoteError.Who): the text is
// quoted on in the abort records and errors of other ranks of a composed
// communicator, whose ranks are the job's.
func (c *Comm) named(re *comm.RemoteError) *comm.RemoteError {
	if c.cfg.Ranks != nil && re.Peer >= 0 && re.Peer < c.size {
		re.Who = fmt.Sprintf("rank %d", c.cfg.Ranks[re.Peer])
	}
	return re
}
