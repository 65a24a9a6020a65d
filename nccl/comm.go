package nccl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// Config is how a Comm is made.
type Config struct {
	// Device is the GPU this rank's buffers live on. Required.
	Device *Device
	// Stream, if not zero, is the caller's CUstream: every NCCL operation
	// is queued on it, so that the caller's kernels and the collectives run
	// in the order the caller queued them. If zero, the Comm makes a
	// non-blocking stream of its own.
	Stream uintptr
	// Name names the communicator in errors. If empty, defaults to "nccl".
	Name string
	// Logger receives the communicator's logs. If nil, defaults to
	// slog.Default().
	Logger *slog.Logger
	// FlightRecorder, if positive, makes the communicator (and its Split
	// children) keep its last FlightRecorder collectives (tier.FlightRecorder,
	// each with where it is: compared over the control, or queued on the
	// stream and waiting for its event; its end is when the event
	// completed) and write them to Logger at its first deadline, abort,
	// mismatch or peer failure, as nexar.Options.FlightRecorder. If zero,
	// nothing is recorded.
	FlightRecorder int
}

// Comm is a comm.Communicator on device buffers, over NCCL.
//
// It is made over a host communicator of the same ranks, its control
// (shm or nexar within a node), which it owns from then on: the unique id
// travels over it, every collective's arguments are compared over it
// before NCCL sees them (so a mismatched or rejected call is an error on
// every rank instead of a hang inside NCCL), Send and Recv travel over it
// (staged through page-locked host memory: NCCL's point-to-point has no
// tags), and its failure (a peer that died or aborted) aborts the NCCL
// communicator. Collectives run as NCCL operations on the stream, and
// their Work completes on a CUDA event recorded after them.
//
// A collective passes three ordered stages: Start sends its arguments to
// the control (non-blocking), the launcher waits for every rank's
// arguments and queues the NCCL operation and an event, and the completer
// polls the event (and the context, and NCCL's asynchronous error). So
// the host comparison of call k+1 overlaps the GPU's work on call k.
type Comm struct {
	tier.Blocking
	lib     *Library
	dev     *Device
	th      *osThread // every NCCL call of this communicator runs here
	control comm.Communicator
	watcher *watcher
	cfg     Config
	log     *slog.Logger
	rank    int
	size    int
	// minComputeCap is the smallest compute capability of the ranks'
	// devices (agree), the same on every rank; a Split's children keep
	// their parent's.
	minComputeCap int
	nc            ncclComm
	stream        cuStream
	own           bool // the stream is the Comm's own
	// events are completed events kept for reuse (EventCreate per
	// collective costs a driver call and its bookkeeping); only the
	// device thread touches them.
	events []cuEvent
	flag   comm.Buffer // one byte of device memory for Barrier

	exec *tier.Exec[*task]    // numbers, sends the records, launches in order
	rec  *tier.FlightRecorder // nil unless Config.FlightRecorder

	mu     sync.Mutex // guards the fields below
	closed bool
	// failure keeps the first failure that aborted the communicator, its
	// cause (tier.Failure.Abort); collectives' faults, the control's
	// failure and Abort feed it.
	failure tier.Failure
	// abortedCh is closed when the failure machine aborts the
	// communicator (comm.Control's Aborted).
	abortedCh chan struct{}
	inFlight  int           // collectives started and not yet complete
	slots     []*ncclComm   // out slots of failed splits, which NCCL may still write
	scratch   []comm.Buffer // free device scratch, reused (cuMemFree may synchronize the device)
	// queued are the tasks whose events the completer has yet to see
	// complete, in order (exec.go); abort asks their events first.
	queued []*task
	// ncAborted: CommAbort was called (on the communicator's thread,
	// which alone reads it): an event that completes after it may have
	// been ended by the abort.
	ncAborted bool

	// mismatchTold: the launcher reported a mismatch that aborted the
	// communicator before a call's comparison (launcher); the launcher's.
	mismatchTold bool

	completeQ chan *task
	stopped   chan struct{} // closed when the completer has ended
	watchDone chan struct{}
}

// New makes the NCCL communicator of the ranks of control, which becomes
// the Comm's (Close closes it; so does a failed New, after telling the
// peers). It is a collective on control: every rank calls it, with its own
// Device. ctx bounds the initialization: on its end, or when a peer's
// init fails or the control fails (a peer died), every rank's NCCL init
// is aborted and New returns an error.
func New(ctx context.Context, control comm.Communicator, cfg Config) (*Comm, error) {
	if control == nil || cfg.Device == nil {
		return nil, errors.New("nccl.New: the control communicator and Config.Device are required")
	}
	if cfg.Name == "" {
		cfg.Name = "nccl"
	}
	if cfg.FlightRecorder < 0 {
		return nil, fmt.Errorf("nccl.New: Config.FlightRecorder %d is negative", cfg.FlightRecorder)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	d := cfg.Device
	rank, size := control.Rank(), control.Size()
	fail := func(err error) (*Comm, error) {
		return nil, fmt.Errorf("nccl.New: rank %d of %d on %v: %w", rank, size, d, err)
	}
	if d.lib.nccl == nil {
		control.Close()
		return fail(fmt.Errorf("%v has a CUDA driver but no NCCL library loaded", d.lib))
	}
	th, err := d.newThread()
	if err != nil {
		control.Close()
		return fail(err)
	}
	w := watchControl(control)
	// giveUp tells the peers (their watch ends their init) and releases
	// what this rank holds.
	giveUp := func(err error) (*Comm, error) {
		control.Abort(tier.Inside(err))
		control.Close()
		<-w.done
		th.stop()
		return fail(err)
	}

	// The unique id: made on rank 0, broadcast over the control.
	var id uniqueID
	if rank == 0 {
		if err := th.do(func() error {
			if r := d.lib.nccl.GetUniqueID(&id); r != ncclSuccess {
				return d.lib.ncclError("ncclGetUniqueId", r, 0)
			}
			return nil
		}); err != nil {
			return giveUp(err)
		}
	}
	if err := control.Broadcast(ctx, comm.Host(id[:]), 0); err != nil {
		return giveUp(fmt.Errorf("sharing the unique id: %w", err))
	}
	nc, err := initComm(ctx, th, d.lib, nil, w.done, func(out *ncclComm, cfg *ncclConfig) ncclResult {
		return d.lib.nccl.CommInitRankScalable(out, int32(size), int32(rank), 1, &id, cfg)
	}, "ncclCommInitRankScalable")
	if err != nil {
		return giveUp(err)
	}
	// Every rank learns that every other one succeeded, so that no rank
	// uses a communicator a peer has given up on (a peer that failed
	// aborted the control: this AllGather fails).
	minCap, err := agree(ctx, control, d.computeCap)
	if err != nil {
		_ = th.do(func() error { d.lib.nccl.CommAbort(nc); return nil })
		return giveUp(err)
	}
	c, err := start(d, th, control, w, nc, cfg, minCap)
	if err != nil {
		_ = th.do(func() error { d.lib.nccl.CommAbort(nc); return nil })
		return giveUp(err)
	}
	return c, nil
}

// initComm runs a non-blocking NCCL init (or a split of parent) on th and
// polls it until it is done, ctx ends or stop is closed (an init is
// aborted; a split's parent is the caller's to abort), or it fails. An
// init hands out the new communicator at once and is polled on it; a
// split is polled on its parent, and its child appears only once it is
// complete (init.cc, ncclCommInitChildComm: "*newcomm should be
// NCCL_COMM_NULL until comm split fully complete"), or never for
// NCCL_SPLIT_NOCOLOR. NCCL writes the child from its own thread after the
// call returned, so the slot it writes lives on the heap, and a failed
// split leaves it to the parent, which keeps it (and aborts a child NCCL
// stored there) for as long as it lives.
func initComm(ctx context.Context, th *osThread, lib *Library, parent *Comm, stop <-chan struct{}, call func(*ncclComm, *ncclConfig) ncclResult, name string) (ncclComm, error) {
	slot := new(ncclComm)
	cfg := newConfig(false)
	fail := func(err error) (ncclComm, error) {
		if parent != nil {
			parent.keep(slot)
		} else if *slot != 0 {
			_ = th.do(func() error { lib.nccl.CommAbort(*slot); return nil })
		}
		return 0, err
	}
	// live is the communicator to poll, or an error once the parent was
	// aborted (its handle is freed then: never touch it again). It runs on
	// th, where the parent's CommAbort runs too.
	live := func() (ncclComm, error) {
		if parent == nil {
			return *slot, nil
		}
		if _, aborted := parent.state(); aborted != nil {
			return 0, &comm.AbortedError{Cause: aborted}
		}
		return parent.nc, nil
	}
	err := th.do(func() error {
		if _, err := live(); err != nil {
			return err
		}
		r := call(slot, &cfg)
		if r != ncclSuccess && r != ncclInProgress {
			return lib.ncclError(name, r, *slot)
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	err = poll(ctx, stop, func() (bool, error) {
		var state ncclResult
		err := th.do(func() error {
			on, err := live()
			if err != nil {
				return err
			}
			if r := lib.nccl.CommGetAsyncError(on, &state); r != ncclSuccess {
				return lib.ncclError("ncclCommGetAsyncError", r, on)
			}
			if state != ncclSuccess && state != ncclInProgress {
				return lib.ncclError(name, state, on)
			}
			return nil
		})
		return err == nil && state == ncclSuccess, err
	})
	runtime.KeepAlive(&cfg)
	if err != nil {
		return fail(err)
	}
	return *slot, nil
}

// poll calls done until it reports true or an error, ctx ends or stop is
// closed, backing off from a few microseconds to a millisecond between
// calls.
func poll(ctx context.Context, stop <-chan struct{}, done func() (bool, error)) error {
	wait := time.Microsecond
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return tier.ContextError(ctx.Err())
		case <-stop:
			return errors.New("the control communicator failed (a peer gave up or died) while NCCL was still initializing")
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Millisecond)
	}
}

// agree waits until every rank of control got this far (a rank that
// failed aborted the control instead, which fails this) and returns the
// smallest compute capability of the ranks' devices, given theirs
// (10·major + minor): what NCCL checks its fp8 reductions against
// (comm->minCompCap), so that every rank decides alike where they run.
func agree(ctx context.Context, control comm.Communicator, computeCap int) (int, error) {
	mine := []byte{byte(min(computeCap, 255))}
	all := make([]byte, control.Size())
	if err := control.AllGather(ctx, comm.Host(mine), comm.Host(all)); err != nil {
		return 0, fmt.Errorf("waiting for every rank's NCCL init: %w", err)
	}
	return int(slices.Min(all)), nil
}

// watcher is a receive from this rank itself on the control's watchTag,
// which no one sends: it ends only when the control fails (a peer died or
// aborted) or closes. The control bounds each Recv by a timeout of its own
// (nexar's and shm's Options.Timeout, 10 minutes by default), which says
// nothing about the peers: a Recv that ends by it alone is posted again,
// so a communicator outlives that timeout.
type watcher struct {
	done chan struct{}
	err  error // set before done is closed
}

func watchControl(control comm.Communicator) *watcher {
	w := &watcher{done: make(chan struct{})}
	go func() {
		var b [1]byte
		for {
			w.err = control.Recv(context.Background(), comm.Host(b[:]), control.Rank(), watchTag)
			if w.err == nil {
				w.err = errors.New("unexpected message on the control's reserved tag")
			}
			if !recvTimedOut(w.err) {
				break
			}
		}
		close(w.done)
	}()
	return w
}

// recvTimedOut reports whether err ended a Recv by the Recv's own timeout
// only (no abort, failure, close or mismatch of the communicator behind
// it).
func recvTimedOut(err error) bool {
	if !errors.Is(err, comm.ErrTimeout) {
		return false
	}
	for _, e := range []error{comm.ErrAborted, comm.ErrPeerFailed, comm.ErrClosed, comm.ErrMismatch, comm.ErrCanceled} {
		if errors.Is(err, e) {
			return false
		}
	}
	return true
}

// start makes the Comm of an initialized NCCL communicator and starts its
// stages.
func start(d *Device, th *osThread, control comm.Communicator, w *watcher, nc ncclComm, cfg Config, minComputeCap int) (*Comm, error) {
	c := &Comm{
		lib: d.lib, dev: d, th: th, control: control, watcher: w, cfg: cfg, log: cfg.Logger, minComputeCap: minComputeCap,
		rank: control.Rank(), size: control.Size(), nc: nc, failure: tier.Failure{Rank: control.Rank()},
		stream:    cuStream(cfg.Stream),
		completeQ: make(chan *task, 4096),
		abortedCh: make(chan struct{}),
		stopped:   make(chan struct{}),
		watchDone: make(chan struct{}),
	}
	c.Blocking = tier.Blocking{S: c}
	c.exec = c.newExec()
	err := th.do(func() error {
		if c.stream == 0 {
			if r := c.lib.drv.StreamCreate(&c.stream, cuStreamNonBlocking); r != cudaSuccess {
				return c.lib.cuError("cuStreamCreate", r)
			}
			c.own = true
		}
		return nil
	})
	if err == nil {
		c.flag, err = d.Alloc(comm.U8, 1)
	}
	if err != nil {
		if c.own {
			_ = th.do(func() error { c.lib.drv.StreamDestroy(c.stream); return nil })
		}
		return nil, err
	}
	go func() { defer close(c.stopped); c.completer() }()
	go c.watch()
	return c, nil
}

// maxPooledEvents bounds the events a communicator keeps for reuse: as
// many as collectives are commonly in flight.
const maxPooledEvents = 64

// newEvent records an event on the communicator's stream, reusing a
// completed one when it can. On the device thread.
func (c *Comm) newEvent(ev *cuEvent) error {
	if n := len(c.events); n > 0 {
		*ev, c.events = c.events[n-1], c.events[:n-1]
	} else if r := c.lib.drv.EventCreate(ev, cuEventDisableTiming); r != cudaSuccess {
		*ev = 0
		return c.lib.cuError("cuEventCreate", r)
	}
	if r := c.lib.drv.EventRecord(*ev, c.stream); r != cudaSuccess {
		c.lib.drv.EventDestroy(*ev)
		*ev = 0
		return c.lib.cuError("cuEventRecord", r)
	}
	return nil
}

// recycle keeps a completed event for newEvent, or destroys it. On the
// device thread; an event that did not complete (a failed stream) is
// destroyed, never reused.
func (c *Comm) recycle(ev cuEvent, completed bool) {
	if completed && len(c.events) < maxPooledEvents {
		c.events = append(c.events, ev)
		return
	}
	c.lib.drv.EventDestroy(ev)
}

// Rank implements comm.Communicator.
func (c *Comm) Rank() int { return c.rank }

// Size implements comm.Communicator.
func (c *Comm) Size() int { return c.size }

// Device is the GPU the communicator's buffers live on.
func (c *Comm) Device() *Device { return c.dev }

func (c *Comm) String() string {
	return fmt.Sprintf("%s rank %d of %d on %v", c.cfg.Name, c.rank, c.size, c.dev)
}

// opError wraps err as an error of this rank's operation.
func (c *Comm) opError(kind comm.Kind, seq uint64, peer int, err error) error {
	return &comm.OpError{Rank: c.rank, Peer: peer, Kind: kind, Seq: seq, Comm: c.cfg.Name, Err: err}
}

// state is closed and aborted, read together.
func (c *Comm) state() (closed bool, aborted error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed, c.failure.AbortCause()
}

// keep holds the slot of a failed split for as long as the communicator
// lives: NCCL may still write a child there (ncclCommInitRankFunc stores
// it even when the init failed).
func (c *Comm) keep(slot *ncclComm) {
	c.mu.Lock()
	c.slots = append(c.slots, slot)
	c.mu.Unlock()
}

// abortChildren aborts the children of failed splits that NCCL stored
// after all (on c.th, once their parent is aborted or idle).
func (c *Comm) abortChildren() {
	c.mu.Lock()
	slots := c.slots
	c.mu.Unlock()
	for _, s := range slots {
		if *s != 0 {
			c.lib.nccl.CommAbort(*s)
			*s = 0
		}
	}
}

// live runs f on the communicator's thread unless it was aborted
// (CommAbort freed the NCCL communicator: nothing may touch it after).
// abort runs CommAbort on the same thread after marking the communicator
// aborted, so f never races with it.
func (c *Comm) live(f func() error) error {
	return c.th.do(func() error {
		if _, aborted := c.state(); aborted != nil {
			return &comm.AbortedError{Cause: aborted}
		}
		return f()
	})
}

// Abort implements comm.Control: the NCCL communicator is aborted (its
// operations in flight end), and so is the control, which tells every peer.
func (c *Comm) Abort(cause error) { c.abort(tier.FromOutside(cause)) }

// abort aborts the communicator with cause; only the first call counts.
func (c *Comm) abort(cause error) {
	c.mu.Lock()
	if c.closed || c.failure.Abort(cause, false, false).Aborted == nil {
		c.mu.Unlock()
		return
	}
	close(c.abortedCh)
	c.mu.Unlock()
	c.log.Debug("nccl: aborted", "comm", c.cfg.Name, "rank", c.rank, "cause", cause)
	_ = c.th.do(func() error {
		c.markFinished()
		c.lib.nccl.CommAbort(c.nc)
		c.ncAborted = true
		c.abortChildren()
		return nil
	})
	c.control.Abort(tier.Inside(cause)) // the control numbers its ranks as this communicator does
}

// Aborted implements comm.Control: the channel is closed once the
// communicator is aborted, by Abort, by a failure its collectives met, or
// by its control's failure (watch).
func (c *Comm) Aborted() <-chan struct{} { return c.abortedCh }

// AbortCause implements comm.Control: the failure that aborted the
// communicator, nil before.
func (c *Comm) AbortCause() error {
	_, aborted := c.state()
	return aborted
}

// SetProgress implements comm.Control with the control's census (a
// hierarchy whose world part is a Comm asks over the host communicator
// beside it).
func (c *Comm) SetProgress(f func() comm.Progress) (remove func(), ok bool) {
	return c.control.SetProgress(f)
}

// Progress implements comm.Control with the control's census.
func (c *Comm) Progress(ctx context.Context) (answers []comm.Progress, answered []bool) {
	return c.control.Progress(ctx)
}

// Announce implements comm.Control with the control's census.
func (c *Comm) Announce(p comm.Progress) { c.control.Announce(p) }

// PeerFailed reports that the process of rank peer is gone, as an outside
// failure detector saw it (comm.Control): the control is told and the
// communicator is aborted with a *comm.PeerError.
func (c *Comm) PeerFailed(peer int, cause error) {
	if peer < 0 || peer >= c.size || peer == c.rank {
		return
	}
	c.control.PeerFailed(peer, cause)
	c.abort(&comm.PeerError{Peer: peer, Err: cause})
}

// watch aborts the NCCL communicator when the control fails (a peer died
// or aborted), so that an operation stuck inside NCCL waiting for a dead
// peer ends.
func (c *Comm) watch() {
	defer close(c.watchDone)
	<-c.watcher.done
	if closed, _ := c.state(); closed {
		return
	}
	c.abort(fmt.Errorf("the control communicator failed: %w", c.watcher.err))
}

// allocScratch returns n elements of dt of device memory from the
// communicator's pool (releaseScratch gives them back): cuMemFree may
// synchronize the whole device, which would stall this thread behind
// every communicator's kernels.
func (c *Comm) allocScratch(dt comm.DType, n int) (comm.Buffer, error) {
	need := n * dt.Size()
	c.mu.Lock()
	for i, b := range c.scratch {
		if b.Len() >= need {
			c.scratch = append(c.scratch[:i], c.scratch[i+1:]...)
			c.mu.Unlock()
			return comm.Device(b.Ptr(), n, dt, c.dev.ordinal), nil
		}
	}
	c.mu.Unlock()
	b, err := c.dev.Alloc(comm.U8, max(need, 1))
	if err != nil {
		return comm.Buffer{}, err
	}
	return comm.Device(b.Ptr(), n, dt, c.dev.ordinal), nil
}

// releaseScratch returns a buffer from allocScratch to the pool.
func (c *Comm) releaseScratch(b comm.Buffer) {
	c.mu.Lock()
	c.scratch = append(c.scratch, comm.Device(b.Ptr(), max(b.ByteLen(), 1), comm.U8, c.dev.ordinal))
	c.mu.Unlock()
}

// freeScratch frees the pool (Close).
func (c *Comm) freeScratch() {
	c.mu.Lock()
	pool := c.scratch
	c.scratch = nil
	c.mu.Unlock()
	for _, b := range pool {
		c.dev.Free(b)
	}
}

// watchTag is the control's tag for watch; Send and Recv use tag+1.
const watchTag = 0

// Close implements comm.Communicator. Operations queued or in flight fail
// with comm.ErrClosed (the NCCL communicator is aborted if any are in
// flight, so that no peer waits for them), the stream and NCCL
// communicator are released, and the control is closed.
func (c *Comm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	busy := c.inFlight > 0 && c.failure.AbortCause() == nil
	c.mu.Unlock()
	if busy {
		c.abort(comm.ErrClosed)
	}
	c.exec.Close() // refuses every later Start (ErrClosed), so admit need not
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.exec.Wait() // the launch in progress, if any, hands its task on
	close(c.completeQ)
	<-c.stopped
	err := c.control.Close()
	<-c.watchDone
	c.dev.Free(c.flag)
	c.freeScratch()
	_ = c.th.do(func() error {
		// CommDestroy of a communicator with an asynchronous error returns
		// early inside a group (init.cc, ncclCommDestroy →
		// ncclCommEnsureReady) and leaves the thread's group open: abort
		// such a one instead.
		if _, aborted := c.state(); aborted == nil && !busy {
			var state ncclResult
			if r := c.lib.nccl.CommGetAsyncError(c.nc, &state); r != ncclSuccess || state != ncclSuccess ||
				c.lib.nccl.CommDestroy(c.nc) != ncclSuccess {
				c.lib.nccl.CommAbort(c.nc)
			}
		}
		c.abortChildren()
		for _, ev := range c.events {
			c.lib.drv.EventDestroy(ev)
		}
		c.events = nil
		if c.own {
			c.lib.drv.StreamDestroy(c.stream)
		}
		return nil
	})
	c.th.stop()
	return err
}
