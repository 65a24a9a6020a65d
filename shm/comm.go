package shm

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// Comm is one rank of a shared-memory communicator. It implements
// comm.Communicator; its methods may be called from several goroutines.
//
// Collectives run one at a time, in the order they were started, on an
// executor: the goroutine of a blocking call when nothing else is queued
// (no hand-off, for latency), else a goroutine that drains the queue.
// Send and Recv run on a point-to-point engine of their own, so they
// neither wait for nor block the collectives.
type Comm struct {
	tier.Blocking
	cfg   Config
	name  string
	rank  int
	size  int
	job   int // this process's rank in the whole job (Config.Ranks), or rank
	seg   *segment
	me    procID
	words []rankWords // every rank's control words, by rank
	mine  rankWords   // words[rank]
	// inProcess: every rank is a goroutine of this process (NewLocal), so
	// waiting yields to the Go scheduler only.
	inProcess bool
	spin      int           // busy checks before a wait yields (see spinChecks)
	yieldTime time.Duration // yielding before a wait sleeps (yieldFor, or yieldCrowded)
	// p2pYield is the point-to-point engine's yielding before it sleeps
	// (waitPolicy).
	p2pYield time.Duration

	exec   *tier.Exec[op]       // numbers and runs the collectives
	rec    *tier.FlightRecorder // nil unless Config.FlightRecorder
	checks tier.CheckCache      // the calls this rank found good lately

	mu sync.Mutex // guards the fields below
	// failure decides how each collective's failure ends it and when the
	// communicator is aborted, with which cause (tier.Failure); fed under
	// mu (input). Its notices travel as the step headers and the abort
	// record.
	failure tier.Failure
	// abortedCh is closed when the failure machine aborts the
	// communicator (comm.Control's Aborted).
	abortedCh chan struct{}
	closed    bool
	splits    int // Split calls, for the children's names

	x   execState // owned by the running collective (see newExec)
	p2p *p2pEngine

	users   sync.WaitGroup // goroutines that touch the mapping but the executor's: the p2p engine, the heartbeat, Abort
	closing atomic.Bool    // set by Close: every wait ends with comm.ErrClosed
	killed  atomic.Bool    // the rank behaves as a process that died; only tests set it (export_test.go)
	passed  atomic.Uint64  // the last step whose wait ended with every peer posted (abortPassed)
	shrinks atomic.Uint64  // Shrink calls, for the survivors' segment names (shrink.go)
	stopHB  chan struct{}
	stalls  *stallWatch // this process's stalls, as the heartbeat goroutine sees them
}

// New attaches this process as rank cfg.Rank of the communicator
// cfg.Namespace on this host, and returns when all cfg.Size ranks have
// (within cfg.ConnectTimeout and ctx).
func New(ctx context.Context, cfg Config) (*Comm, error) {
	if !supported {
		return nil, fmt.Errorf("shm: not supported on %s: shared-memory communicators need Linux", runtime.GOOS)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	return attach(ctx, cfg, segmentPath(cfg.Namespace, "world"), cfg.Name)
}

// NewLocal returns n communicators in this process (goroutine ranks, each
// with its own mapping of the segment) — tests and simulations. cfg gives
// the options; its Namespace, Rank and Size are ignored.
func NewLocal(ctx context.Context, namespace string, n int, cfg Config) ([]*Comm, error) {
	if !supported {
		return nil, fmt.Errorf("shm: not supported on %s: shared-memory communicators need Linux", runtime.GOOS)
	}
	cfg.Namespace, cfg.Rank, cfg.Size = namespace, 0, n
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			rc := cfg
			rc.Rank = r
			cs[r], errs[r] = New(ctx, rc)
			if errs[r] != nil {
				cancel() // the others stop waiting for this rank
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		CloseAll(cs)
		return nil, err
	}
	return cs, nil
}

// CloseAll closes the communicators of one process's ranks at once.
func CloseAll(cs []*Comm) error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		if c != nil {
			wg.Go(func() { errs[i] = c.Close() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// attach creates (rank 0) or opens the segment at path, registers this
// rank, waits for the others and unlinks the file.
func attach(ctx context.Context, cfg Config, path, name string) (*Comm, error) {
	me := selfIdentity()
	var seg *segment
	var err error
	if cfg.Rank == 0 {
		seg, err = createSegment(path, cfg.Size, max(cfg.SlotBytes, 256*cfg.Size), cfg.StepBytes, cfg.eagerBytes(), me, cfg.Logger)
	} else {
		seg, err = openSegment(ctx, path, cfg.Size)
	}
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Comm, error) {
		if seg.created {
			seg.unlink()
		}
		seg.unmap()
		return nil, err
	}
	if err := seg.register(cfg.Rank, me); err != nil {
		return fail(err)
	}
	c := newComm(cfg, name, seg, me)
	if err := seg.waitAttached(ctx); err != nil {
		c.Close()
		return nil, err
	}
	seg.unlink()
	c.attached()
	return c, nil
}

// attached completes c once every rank has registered.
func (c *Comm) attached() {
	c.inProcess = true
	for r := range c.size {
		if readProc(c.seg.mem, c.seg.l.ctl(r)+cProc).pid != c.me.pid {
			c.inProcess = false
		}
	}
	c.spin, c.yieldTime, c.p2pYield = waitPolicy(c.size, c.cfg.HostProcs, runtime.NumCPU(), c.inProcess)
}

// waitPolicy is how a rank waits (sync.go): the checks before it yields,
// how long a collective's wait and the point-to-point engine's yield
// before they sleep. With more ranks or processes on the host than CPUs,
// few checks and a short yield, and the engine of ranks that are processes
// sleeps at once (p2pYieldCrowded). Goroutines of one process yield to the
// Go scheduler, which takes no core from another process: their engine
// keeps its yield (the shared-memory suite ran 10% slower sleeping at
// once).
func waitPolicy(ranks, hostProcs, cpus int, inProcess bool) (spin int, yield, p2pYield time.Duration) {
	switch {
	case max(ranks, hostProcs) <= cpus:
		return spinChecks, yieldFor, yieldFor
	case inProcess:
		return spinOver, yieldCrowded, yieldCrowded
	}
	return spinOver, yieldCrowded, p2pYieldCrowded
}

func newComm(cfg Config, name string, seg *segment, me procID) *Comm {
	c := &Comm{cfg: cfg, name: name, rank: cfg.Rank, size: cfg.Size, job: cfg.Rank, seg: seg, me: me, stopHB: make(chan struct{}), abortedCh: make(chan struct{}), failure: tier.Failure{Rank: cfg.Rank},
		stalls: newStallWatch(cfg.FailureTimeout, time.Now())}
	if cfg.Ranks != nil {
		c.job = cfg.Ranks[c.rank]
	}
	c.Blocking = tier.Blocking{S: c}
	c.words = make([]rankWords, c.size)
	for r := range c.size {
		c.words[r] = wordsOf(seg.mem, seg.l, r)
	}
	c.mine = c.words[c.rank]
	c.x = execState{watch: newWatch(c.size), done: make([]uint64, c.size)}
	c.exec = c.newExec()
	c.p2p = newP2P(c)
	c.users.Add(1)
	go c.heartbeat(c.stopHB)
	return c
}

// Rank implements comm.Communicator.
func (c *Comm) Rank() int { return c.rank }

// Size implements comm.Communicator.
func (c *Comm) Size() int { return c.size }

// Name is the communicator's name in errors and logs ("world",
// "world/split#1(color 0)", or Config.Name's).
func (c *Comm) Name() string { return c.name }

// who is how the communicator's log lines name it and this process: its
// name, the job's rank first, then this communicator's where
// Config.Ranks says they differ (comm="node 1 shm" rank=3 local=1).
func (c *Comm) who() []any {
	if c.cfg.Ranks == nil {
		return []any{"comm", c.name, "rank", c.rank}
	}
	return []any{"comm", c.name, "rank", c.job, "local", c.rank}
}

func (c *Comm) String() string {
	return fmt.Sprintf("shm.Comm(%s, rank %d of %d)", c.name, c.rank, c.size)
}

// Close implements comm.Communicator: operations in flight fail with
// comm.ErrClosed, the peers see this rank closed (their operations that
// need it fail with a *comm.PeerError), and the segment is unmapped once
// nothing of this rank touches it. Close is idempotent.
func (c *Comm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.exec.Close()
	c.closing.Store(true)
	c.p2p.close()
	close(c.stopHB)
	c.exec.Wait()
	c.users.Wait()
	c.mu.Lock()
	aborted := c.failure.Aborted() != nil
	c.mu.Unlock()
	// An aborted rank stays aborted for its peers: they read why from its
	// abort record (a mismatch stays a mismatch), not that it closed.
	if !c.killed.Load() && !aborted {
		c.setState(stateClosed)
	}
	if c.seg.created {
		c.seg.unlink() // only if setup failed before the unlink
	}
	c.seg.unmap()
	return nil
}

// abort makes every later call fail fast with cause, fails the
// point-to-point operations in flight, and tells the peers (abort record):
// after a failure in the middle of a collective the ranks no longer agree
// on where they are. Only goroutines counted in users call it.
func (c *Comm) abort(cause error) {
	c.input(func(f *tier.Failure) tier.Effects { return f.Abort(cause, false, false) })
}

// input feeds the failure machine under c.mu and carries out an abort it
// decided: the aborted signal closes and, unless the communicator is
// closed (or the test hook killed it), the abort record goes out and the
// point-to-point operations in flight fail. The machine's notices of a
// collective's failure need no sending here: the stepper's header
// (refuse, LateError) and the abort record carry them.
func (c *Comm) input(in func(*tier.Failure) tier.Effects) {
	c.mu.Lock()
	eff := in(&c.failure)
	closed := c.closed
	if eff.Aborted != nil {
		close(c.abortedCh)
	}
	c.mu.Unlock()
	if eff.Aborted == nil || closed {
		return
	}
	cause := eff.Aborted.Cause
	c.cfg.Logger.Warn("shm: communicator aborted", append(c.who(), "cause", cause)...)
	if !c.killed.Load() {
		c.writeAbort(cause)
	}
	c.p2p.fail(eff.Aborted)
}

// Abort implements comm.Control: the communicator is aborted with cause
// here, and the peers read the abort record (which keeps cause's kind,
// also a mismatch's) as soon as they wait for this rank. A communicator
// composed of this one and others (hierarchy) calls it when another of its
// parts fails.
func (c *Comm) Abort(cause error) { c.abortOpen(tier.FromOutside(cause)) }

// abortOpen is abort for a caller outside the communicator's own calls
// (Abort, PeerFailed): nothing once it is aborted or closed, and Close
// waits while it writes the abort record.
func (c *Comm) abortOpen(cause error) {
	c.mu.Lock()
	if c.failure.Aborted() != nil || c.closed {
		c.mu.Unlock()
		return
	}
	c.users.Add(1) // under mu while open: Close's Wait comes after
	c.mu.Unlock()
	defer c.users.Done()
	c.abort(cause)
}

// PeerFailed implements comm.Control: an outside failure detector (the
// cluster layer's membership) says the process of rank is gone. rank is a
// rank of the whole job, as Config.Ranks numbers this communicator's
// ranks (its own ranks when Ranks is nil); a rank not among them, this
// rank, and a report after the first failure change nothing. The
// communicator is aborted with a *comm.PeerError naming the rank, and its
// peers read the abort record as they would any other. Communicators
// Split from this one are not told: their own liveness check (the
// heartbeat and the process check, within FailureTimeout) finds the
// process gone.
func (c *Comm) PeerFailed(rank int, cause error) {
	q := rank
	if c.cfg.Ranks != nil {
		q = slices.Index(c.cfg.Ranks, rank)
	}
	if q < 0 || q >= c.size || q == c.rank {
		return
	}
	pe := &comm.PeerError{Peer: q, Err: cause}
	if c.cfg.Ranks != nil {
		pe.Addr = fmt.Sprintf("job rank %d", rank)
	}
	c.abortOpen(pe)
}

// The progress census (comm.Control): shm carries none. A communicator
// composed of others asks its census over the part that spans every
// rank of every node, which shared memory on one host never is; a
// hierarchy of one node runs every call on one part, which sees every
// mismatch itself.

// SetProgress implements comm.Control: it installs nothing (ok false),
// since shm carries no census.
func (c *Comm) SetProgress(func() comm.Progress) (remove func(), ok bool) { return func() {}, false }

// Progress implements comm.Control: no rank answers, since shm carries no
// census.
func (c *Comm) Progress(context.Context) (answers []comm.Progress, answered []bool) {
	return make([]comm.Progress, c.size), make([]bool, c.size)
}

// Announce implements comm.Control: it tells nobody, since shm carries
// no census.
func (c *Comm) Announce(comm.Progress) {}

// Aborted implements comm.Control.
func (c *Comm) Aborted() <-chan struct{} { return c.abortedCh }

// AbortCause implements comm.Control.
func (c *Comm) AbortCause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failure.AbortCause()
}
