package shm

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// The step protocol. Every rank has a step counter (posted) in its control
// block, which only it writes. A collective is a sequence of steps; in step
// g a rank writes its part g%2 of its slot (and, on the first step of a
// collective, its meta part g%2), posts g, and waits until every peer has
// posted g; then it reads its peers' parts g%2. A rank writes part g%2
// again at step g+2, after it has seen every peer post g+1, which a peer
// does only after it has finished reading step g: two parts give one
// synchronization per step. Steps are numbered across collectives, so the
// invariant runs on from one collective to the next.
//
// Waiting is a bounded spin, then yielding (runtime.Gosched for rank
// goroutines of one process, sched_yield for processes: with more ranks
// than cores, the rank we wait for may need this core), then sleeping on the
// futex of the peer's bell with a short timeout, so that a cancelled
// context, a closed communicator and a dead peer are noticed. A poster only
// makes the wake system call when someone sleeps.
//
// A process yields only when that can help: when a peer it waits for last
// ran on this CPU (or may have: its CPU is unknown). When every peer still
// behind last ran on another CPU, they are running there, or waiting
// behind another rank that is; giving this CPU to a rank of this CPU that
// waits too would only make the two take turns at a system call and a
// context switch (microseconds each in a VM) instead of seeing the post at
// once. The CPU numbers are hints (a rank may move): after spinYields
// turns without a yield, the rank yields anyway.

// Wait policy.
// Measured on 2 cores: spinning pays when every rank has a core (2 ranks:
// under 1 µs per 8-byte AllReduce, against several µs when yielding at
// once), and only delays the yield that lets a waiting rank run when there
// are more ranks than cores. Yielding lasts long enough to cover the
// imbalance of a large step (hundreds of µs) without a futex wake-up, which
// costs tens of µs in a VM; a longer wait sleeps.
const (
	spinChecks   = 100                    // checks before the first yield, when every rank can have a core
	spinOver     = 4                      // the same, with more ranks than cores
	spinYields   = 256                    // turns of the yielding phase spent spinning, at most, between two yields
	yieldFor     = time.Millisecond       // yielding before sleeping
	yieldCrowded = 100 * time.Microsecond // the same, with more processes than cores on the host (Config.HostProcs)
	sleepMin     = 500 * time.Microsecond // first futex timeout; doubles
	sleepMax     = 10 * time.Millisecond  // longest futex timeout
)

// p2pYieldCrowded is the point-to-point engine's yielding on a crowded
// host, when its ranks are processes: none, it sleeps after its few
// checks. A Recv or Send waits
// for a peer that is itself waiting on something else (the network,
// in a hierarchy's sendrecv ring or a pipeline), not for a node-mate
// one step behind as a collective's step does, and a process that
// yields stays runnable and takes its turns on the cores from the
// transport that has the work. On 2 cores with 4 processes over QUIC,
// the hierarchical sendrecv ring (one intra-node hop in two) ran at
// 0.77× flat's speed yielding for 100 µs and 0.98× sleeping at once
// (medians over 8 B–4 KiB, 3 runs of 15 interleaved repeats each).
// The collectives keep their yield: without it the hierarchical
// AllReduce lost a fifth of its speed.
const p2pYieldCrowded = 0

// errKilled is the error of a rank that a test "killed" (kill, in
// export_test.go).
var errKilled = errors.New("shm: this rank was killed by a test hook")

// post publishes step g.
func (c *Comm) post(g uint64) {
	if !c.inProcess { // the CPU hint serves only processes (see pause)
		c.noteCPU()
	}
	atomic.StoreUint64(c.mine.posted, g)
	chime(c.mine.bell, c.mine.sleepers)
}

// ctxErr is the end of ctx as a comm error (ErrTimeout or ErrCanceled).
func ctxErr(ctx context.Context) error {
	if err := context.Cause(ctx); err != nil {
		return tier.ContextError(err)
	}
	return nil
}

// bound is what ends a wait from outside: the operation's context and
// Config.Timeout, kept as a plain deadline (a context with a timer per
// collective would cost more than a small collective itself). The
// deadline is set by the first wait that reads the clock, so a collective
// that never waits long never reads it.
type bound struct {
	ctx      context.Context
	timeout  time.Duration // 0: none
	deadline time.Time
}

func (c *Comm) boundFor(ctx context.Context) bound {
	return bound{ctx: ctx, timeout: c.cfg.Timeout}
}

// err is why the wait must end now, if it must.
func (b *bound) err(now time.Time) error {
	if b.ctx.Err() != nil {
		return ctxErr(b.ctx)
	}
	if b.timeout <= 0 {
		return nil
	}
	if b.deadline.IsZero() {
		b.deadline = now.Add(b.timeout)
	}
	if now.After(b.deadline) {
		return fmt.Errorf("%w: the operation took longer than Config.Timeout (%v)", comm.ErrTimeout, b.timeout)
	}
	return nil
}

// local reports why this rank must stop waiting, if it must.
func (c *Comm) local() error {
	if c.killed.Load() {
		return errKilled
	}
	if c.closing.Load() {
		return comm.ErrClosed
	}
	return nil
}

// waitAll waits until every peer has posted step g. It fails when b ends,
// this rank closes, or a peer fails or gives up (see peerState, checkPeer).
func (c *Comm) waitAll(b *bound, g uint64, w *watch) error {
	return c.wait(b, w, waitOn{ready: func(q int) bool { return atomic.LoadUint64(c.words[q].posted) >= g }, only: -1, step: g})
}

// waitOn is what a wait waits for: a step (waitAll), or a peer's eager
// slot or the release of this rank's (eager.go).
type waitOn struct {
	// ready reports whether peer q has done what the wait needs.
	ready func(q int) bool
	// only is the one peer waited for, or -1: every peer.
	only int
	// step is a step wait's step: its end is recorded (abortPassed), a
	// peer that aborted in it has left (leftIn), and the flight recorder
	// names it. 0: not a step wait.
	step uint64
	// probe, if set, is news that ends the wait (a mismatch a peer's
	// words show): asked with every liveness check and before a peer's
	// failure is returned, which it explains better.
	probe func() error
}

// wait waits until every peer that on names is ready. It fails when b
// ends, this rank closes, a peer fails or gives up (see peerState,
// checkPeer), or on's probe has news.
func (c *Comm) wait(b *bound, w *watch, on waitOn) error {
	q, end := 0, c.size // peers below q are known to be ready
	if on.only >= 0 {
		q, end = on.only, on.only+1
	}
	// explained is a peer's failure or leaving, err, unless the probe has
	// news, which comes first: a peer that aborted on a mismatch it saw
	// is reported as the mismatch this rank sees too (asked again after
	// the peer's state was read: the mismatch may have become visible
	// since the last turn's probe).
	explained := func(err error) error {
		if on.probe != nil {
			if perr := on.probe(); perr != nil {
				return perr
			}
		}
		return err
	}
	// failed is p's failure, unless p is ready meanwhile: a peer may post
	// g, see a mismatch or a failure there, abort, close or even exit
	// between the read of its counter and the look at its state, and its
	// post, not its later state, is what this step is owed.
	failed := func(err error, p int) error {
		if err == nil || on.ready(p) {
			return nil
		}
		return explained(err)
	}
	behind := func() (bool, error) {
		for ; q < end; q++ {
			if q == c.rank || on.ready(q) {
				continue
			}
			if err := failed(c.peerState(q), q); err != nil {
				return true, err
			}
			return true, nil
		}
		return false, nil
	}
	var start time.Time
	sleep := sleepMin
	spin := c.spin
	yielded := 0 // the clock is read every 8th yield only
	spun := 0    // turns spent spinning since the last yield
	noted := false
	for i := 0; ; i++ {
		if wait, err := behind(); err != nil || !wait {
			if err == nil && on.step != 0 {
				c.passed.Store(on.step)
			}
			return err
		}
		if err := c.local(); err != nil {
			return err
		}
		if i < spin {
			continue
		}
		if i < yielded && (i-spin)%8 != 0 {
			c.pause(q, end, on.ready, &spun)
			continue
		}
		now := time.Now()
		if i == spin {
			start = now
		}
		if err := b.err(now); err != nil {
			return err
		}
		if now.Sub(start) < c.yieldTime {
			yielded = i + 8
			c.pause(q, end, on.ready, &spun)
			continue
		}
		if on.probe != nil {
			if err := on.probe(); err != nil {
				return err
			}
		}
		if on.step != 0 {
			if c.rec != nil && !noted {
				noted = true
				c.noteWait(on.step)
			}
			// A peer that posted g and then aborted in it (its context
			// ended while it waited here too) has left the collective:
			// the ranks that still wait for another learn it now, not
			// when that one comes. (It cannot have passed g: q has not
			// posted it.)
			if err := c.leftIn(on.step); err != nil {
				return explained(err)
			}
		}
		// Any peer still behind may be the one that failed, not only q.
		check := c.due(w, now)
		for p := q + 1; p < end; p++ {
			if p != c.rank && !on.ready(p) {
				if err := failed(c.peerState(p), p); err != nil {
					return err
				}
			}
		}
		for p := q; check && p < end; p++ {
			if p != c.rank && !on.ready(p) {
				if err := failed(c.checkPeer(w, p, now), p); err != nil {
					return err
				}
			}
		}
		c.sleepOn(c.words[q].bell, c.words[q].sleepers, sleep, func() bool {
			return on.ready(q) || atomic.LoadUint32(c.words[q].state) != stateAttached
		})
		sleep = min(2*sleep, sleepMax)
	}
}

// leftIn is the abort of a peer that aborted in step g, after it posted
// it, if one did: the peers wait for it in vain from g on.
func (c *Comm) leftIn(g uint64) error {
	for p := range c.size {
		if p == c.rank || atomic.LoadUint32(c.words[p].state) != stateAborted {
			continue
		}
		base := c.seg.l.ctl(p) + cAbort
		if atomic.LoadUint64(u64At(c.seg.mem, base+aStep)) == g &&
			atomic.LoadUint32(u32At(c.seg.mem, base+aFlags))&abortPassed == 0 {
			return c.abortError(p)
		}
	}
	return nil
}

// noteWait tells the flight recorder which node-mates the running
// collective waits on (those that have not posted step g), once per wait
// that outlasts the spinning and yielding.
func (c *Comm) noteWait(g uint64) {
	var behind []int
	for p := range c.size {
		if p != c.rank && atomic.LoadUint64(c.words[p].posted) < g {
			behind = append(behind, p)
		}
	}
	c.rec.Note(c.x.seq, fmt.Sprintf("step %d: waited on node-mates (local ranks) %v", g, behind), behind)
}

// yield lets the rank we wait for run: another goroutine of this process
// (a rank of NewLocal), or another process (sched_yield). A process does
// not call runtime.Gosched: that wakes an idle thread of this process (a
// futex wake-up, and a thread that competes for the CPUs the ranks need),
// which made an 8-byte AllReduce of two processes five times slower.
func (c *Comm) yield() {
	if c.inProcess {
		runtime.Gosched()
		return
	}
	osYield()
}

// pause is one turn of the yielding phase of a wait, in which the peers
// in [q, end) that are not ready may still be behind: a yield when a peer
// still behind last ran on this CPU (or on one it did not know), or when
// the rank has spun spinYields turns since its last yield; else nothing,
// and the wait goes on spinning (see the comment at the top).
func (c *Comm) pause(q, end int, ready func(int) bool, spun *int) {
	if !c.inProcess {
		if here := c.noteCPU(); here != 0 && *spun < spinYields && !c.behindOn(here, q, end, ready) {
			*spun++
			return
		}
	}
	*spun = 0
	c.yield()
}

// noteCPU publishes the CPU this rank runs on, if it changed, and returns
// it (0: unknown).
func (c *Comm) noteCPU() uint32 {
	cpu := cpuID()
	if atomic.LoadUint32(c.mine.cpu) != cpu {
		atomic.StoreUint32(c.mine.cpu, cpu)
	}
	return cpu
}

// behindOn reports whether a peer in [q, end) that is not ready last ran
// on CPU here, or on a CPU it did not know.
func (c *Comm) behindOn(here uint32, q, end int, ready func(int) bool) bool {
	for p := q; p < end; p++ {
		if p == c.rank || ready(p) {
			continue
		}
		if cpu := atomic.LoadUint32(c.words[p].cpu); cpu == 0 || cpu == here {
			return true
		}
	}
	return false
}

// sleepOn sleeps on a futex bell for at most d, unless ready already holds
// once this waiter is counted among the sleepers (the poster bumps the
// bell, then reads the count: one of the two sees the other).
func (c *Comm) sleepOn(bell, sleepers *uint32, d time.Duration, ready func() bool) {
	b := atomic.LoadUint32(bell)
	atomic.AddUint32(sleepers, 1)
	if !ready() {
		futexSleep(bell, b, d)
	}
	atomic.AddUint32(sleepers, ^uint32(0))
}
