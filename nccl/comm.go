package nccl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/hiercomm/hiercomm/comm"
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
	comm.Blocking
	lib     *Library
	dev     *Device
	control comm.Communicator
	cfg     Config
	log     *slog.Logger
	rank    int
	size    int
	nc      ncclComm
	stream  cuStream
	own     bool        // the stream is the Comm's own
	flag    comm.Buffer // one byte of device memory for Barrier

	startMu sync.Mutex // orders Start: sequence numbers and the control's order
	seq     uint64

	mu       sync.Mutex // guards the fields below
	closed   bool
	aborted  error       // the first failure that aborted the communicator
	inFlight int         // collectives started and not yet complete
	slots    []*ncclComm // out slots of failed splits, which NCCL may still write

	launchQ   chan *task
	completeQ chan *task
	stopped   chan struct{} // closed when launcher and completer have ended
	watchDone chan struct{}
}

// New makes the NCCL communicator of the ranks of control, which becomes
// the Comm's (Close closes it). It is a collective on control: every rank
// calls it, with its own Device. ctx bounds the initialization: on its end
// every rank's NCCL init is aborted and New returns an error.
func New(ctx context.Context, control comm.Communicator, cfg Config) (*Comm, error) {
	if control == nil || cfg.Device == nil {
		return nil, errors.New("nccl.New: the control communicator and Config.Device are required")
	}
	if cfg.Name == "" {
		cfg.Name = "nccl"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	d := cfg.Device
	if d.lib.nccl == nil {
		return nil, fmt.Errorf("nccl.New: %v has a CUDA driver but no NCCL library loaded", d.lib)
	}
	rank, size := control.Rank(), control.Size()
	fail := func(err error) (*Comm, error) {
		return nil, fmt.Errorf("nccl.New: rank %d of %d on %v: %w", rank, size, d, err)
	}

	// The unique id: made on rank 0, broadcast over the control.
	var id uniqueID
	if rank == 0 {
		if err := d.do(func() error {
			if r := d.lib.nccl.GetUniqueID(&id); r != ncclSuccess {
				return d.lib.ncclError("ncclGetUniqueId", r, 0)
			}
			return nil
		}); err != nil {
			// The others wait in the Broadcast: abandon it, so they hear.
			_ = control.Broadcast(ctx, comm.Buffer{}, 0)
			return fail(err)
		}
	}
	if err := control.Broadcast(ctx, comm.Host(id[:]), 0); err != nil {
		return fail(fmt.Errorf("sharing the unique id: %w", err))
	}

	nc, err := initComm(ctx, d, nil, func(out *ncclComm, cfg *ncclConfig) ncclResult {
		return d.lib.nccl.CommInitRankScalable(out, int32(size), int32(rank), 1, &id, cfg)
	}, "ncclCommInitRankScalable")
	// Every rank learns whether every other one succeeded, so that no rank
	// uses a communicator a peer has given up on.
	if err := agree(ctx, control, err); err != nil {
		if nc != 0 {
			_ = d.do(func() error { d.lib.nccl.CommAbort(nc); return nil })
		}
		return fail(err)
	}
	c, err := start(d, control, nc, cfg)
	if err != nil {
		return fail(err)
	}
	return c, nil
}

// initComm runs a non-blocking NCCL init (or a split of parent) on the
// device thread and polls it until it is done, ctx ends (an init is
// aborted; a split's parent is the caller's to abort) or it fails. An
// init hands out the new communicator at once and is polled on it; a
// split is polled on its parent, and its child appears only once it is
// complete (init.cc, ncclCommInitChildComm: "*newcomm should be
// NCCL_COMM_NULL until comm split fully complete"), or never for
// NCCL_SPLIT_NOCOLOR. NCCL writes the child from its own thread after the
// call returned, so the slot it writes lives on the heap, and a failed
// split leaves it to the parent to keep until the parent is gone.
func initComm(ctx context.Context, d *Device, parent *Comm, call func(*ncclComm, *ncclConfig) ncclResult, name string) (ncclComm, error) {
	lib := d.lib
	slot := new(ncclComm)
	cfg := newConfig(false)
	fail := func(err error) (ncclComm, error) {
		if parent != nil {
			parent.keep(slot)
		} else if *slot != 0 {
			_ = d.do(func() error { lib.nccl.CommAbort(*slot); return nil })
		}
		return 0, err
	}
	// live is the communicator to poll, or an error once the parent was
	// aborted (its handle is freed then: never touch it again). It runs on
	// the device thread, where the parent's CommAbort runs too.
	live := func() (ncclComm, error) {
		if parent == nil {
			return *slot, nil
		}
		if _, aborted := parent.state(); aborted != nil {
			return 0, &comm.AbortedError{Cause: aborted}
		}
		return parent.nc, nil
	}
	err := d.do(func() error {
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
	err = poll(ctx, func() (bool, error) {
		var state ncclResult
		err := d.do(func() error {
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

// poll calls done until it reports true or an error, or ctx ends, backing
// off from a few microseconds to a millisecond between calls.
func poll(ctx context.Context, done func() (bool, error)) error {
	wait := time.Microsecond
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return comm.ContextError(ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Millisecond)
	}
}

// agree tells every rank of control whether every rank's local step
// succeeded; the result names the first rank that failed.
func agree(ctx context.Context, control comm.Communicator, local error) error {
	mine := []uint8{0}
	if local != nil {
		mine[0] = 1
	}
	all := make([]uint8, control.Size())
	if err := control.AllGather(ctx, comm.Host(mine), comm.Host(all)); err != nil {
		return errors.Join(local, fmt.Errorf("agreeing on the outcome: %w", err))
	}
	if local != nil {
		return local
	}
	for r, bad := range all {
		if bad != 0 {
			return fmt.Errorf("rank %d failed its part (its error says why)", r)
		}
	}
	return nil
}

// start makes the Comm of an initialized NCCL communicator and starts its
// stages.
func start(d *Device, control comm.Communicator, nc ncclComm, cfg Config) (*Comm, error) {
	c := &Comm{
		lib: d.lib, dev: d, control: control, cfg: cfg, log: cfg.Logger,
		rank: control.Rank(), size: control.Size(), nc: nc,
		stream:    cuStream(cfg.Stream),
		launchQ:   make(chan *task, 4096),
		completeQ: make(chan *task, 4096),
		stopped:   make(chan struct{}),
		watchDone: make(chan struct{}),
	}
	c.Blocking = comm.Blocking{S: c}
	err := d.do(func() error {
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
		_ = d.do(func() error { c.lib.nccl.CommAbort(nc); return nil })
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.launcher() }()
	go func() { defer wg.Done(); c.completer() }()
	go func() { wg.Wait(); close(c.stopped) }()
	go c.watch()
	return c, nil
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
	return c.closed, c.aborted
}

// keep holds slot for as long as the communicator lives.
func (c *Comm) keep(slot *ncclComm) {
	c.mu.Lock()
	c.slots = append(c.slots, slot)
	c.mu.Unlock()
}

// live runs f on the device thread unless the communicator was aborted
// (CommAbort freed the NCCL communicator: nothing may touch it after).
// abort runs CommAbort on the same thread after marking the communicator
// aborted, so f never races with it.
func (c *Comm) live(f func() error) error {
	return c.dev.do(func() error {
		if _, aborted := c.state(); aborted != nil {
			return &comm.AbortedError{Cause: aborted}
		}
		return f()
	})
}

// Abort implements comm.Aborter: the NCCL communicator is aborted (its
// operations in flight end), and so is the control, which tells every peer.
func (c *Comm) Abort(cause error) { c.abort(cause) }

// abort aborts the communicator with cause; only the first call counts.
func (c *Comm) abort(cause error) {
	c.mu.Lock()
	if c.aborted != nil || c.closed {
		c.mu.Unlock()
		return
	}
	c.aborted = cause
	c.mu.Unlock()
	c.log.Debug("nccl: aborted", "comm", c.cfg.Name, "rank", c.rank, "cause", cause)
	_ = c.dev.do(func() error { c.lib.nccl.CommAbort(c.nc); return nil })
	if a, ok := c.control.(comm.Aborter); ok {
		a.Abort(cause)
	} else {
		c.control.Close()
	}
}

// PeerFailed reports that the process of rank peer is gone, as an outside
// failure detector saw it: the control is told (if it can be) and the
// communicator is aborted with a *comm.PeerError.
func (c *Comm) PeerFailed(peer int, cause error) {
	if peer < 0 || peer >= c.size || peer == c.rank {
		return
	}
	if pf, ok := c.control.(interface{ PeerFailed(int, error) }); ok {
		pf.PeerFailed(peer, cause)
	}
	c.abort(&comm.PeerError{Peer: peer, Err: cause})
}

// watch waits on a receive from this rank itself on the control's tag 0,
// which no one sends: it ends only when the control fails (a peer died or
// aborted) or closes, and a failure aborts the NCCL communicator, so that
// an operation stuck inside NCCL waiting for a dead peer ends.
func (c *Comm) watch() {
	defer close(c.watchDone)
	var b [1]byte
	err := c.control.Recv(context.Background(), comm.Host(b[:]), c.rank, watchTag)
	if closed, _ := c.state(); closed {
		return
	}
	if err == nil {
		err = errors.New("unexpected message on the control's reserved tag")
	}
	c.abort(fmt.Errorf("the control communicator failed: %w", err))
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
	busy := c.inFlight > 0 && c.aborted == nil
	c.mu.Unlock()
	if busy {
		c.abort(comm.ErrClosed)
	}
	c.startMu.Lock()
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	close(c.launchQ)
	c.startMu.Unlock()
	<-c.stopped
	err := c.control.Close()
	<-c.watchDone
	c.dev.Free(c.flag)
	_ = c.dev.do(func() error {
		if busy {
			return nil // aborted above: CommAbort freed it
		}
		if _, aborted := c.state(); aborted == nil {
			c.lib.nccl.CommDestroy(c.nc)
		}
		if c.own {
			c.lib.drv.StreamDestroy(c.stream)
		}
		return nil
	})
	return err
}
