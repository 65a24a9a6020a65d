// Package ncclfake is an in-process CUDA driver and NCCL (New) behind the
// function table package nccl calls the real ones through
// (nccl/internal/cuapi), with host memory standing in for device memory.
// One New is one machine: every goroutine that uses the Library shares it,
// and the ranks of a test (goroutines) meet through it the way processes
// meet through NCCL. It is built to make code that
// is wrong on a GPU fail here, on machines without one.
//
// Faithful to CUDA and NCCL:
//   - Device memory is an address space of its own (fake_memory.go):
//     MemAlloc hands out addresses no Go object has, never reused, with
//     guard gaps between allocations, holding garbage (0xff bytes: NaN in
//     every float type) until written; every access is checked against
//     the live allocation it falls in. Pointer arithmetic inside an
//     allocation works. Driver calls need Init (nccl.Load calls it;
//     New does too, like Load).
//   - Streams (fake_stream.go) run their work in order on goroutines of
//     their own, after the call that queued it has returned; events and
//     StreamWaitEvent order streams; a failed copy leaves its stream with
//     a sticky error, as CUDA leaves its context. The current context is
//     per OS thread, as in CUDA (on Linux; one for the process elsewhere):
//     it decides what stream 0 is, and which device a stream or a
//     communicator belongs to.
//   - NCCL (fake_nccl.go, fake_launch.go): ranks meet by unique id; with
//     the config's blocking = 0, init, split, finalize and every operation
//     return cuapi.NCCLInProgress and finish in the background, and a call on a
//     communicator whose state is still cuapi.NCCLInProgress is refused with
//     cuapi.NCCLInvalidArgument, as ncclCommEnsureReady refuses it; an
//     asynchronous error sticks and later calls return it; a split stores
//     the child's handle only once the split completes (NCCL's
//     ncclCommInitRankFunc does), so the caller must poll the parent
//     first; groups are per OS thread (NCCL's group state is
//     thread-local); collectives of no elements are discarded, as
//     taskAppend discards them.
//   - Operations (fake_meet.go): the k-th collective of each rank meets
//     the k-th of the others; the k-th send from a to b meets the k-th
//     receive on b from a. A rank waiting for a peer waits until the peer
//     comes or it is itself aborted: a peer's abort, a peer's failure or a
//     peer that never comes leaves it waiting, as a kernel waits.
//   - Arithmetic (fake_reduce.go) is NCCL's, bit for bit where the order
//     of the ranks is fixed (rank order here): Avg is PreMulSum on floats
//     and SumPostDiv on integers; Min and Max on floats return the other
//     operand when one is NaN (fminf, __hmin), unlike comm's kernels. So
//     Avg over 3 ranks is not the sum divided by 3, and a NaN on one rank
//     does not survive Max: as on a GPU.
//
// Deliberately different: where the real thing would hang, corrupt memory
// or work by luck, the fake reports the bug.
//   - Ranks that disagree on a collective (kind, count, dtype, op, root)
//     or on a send/receive pair (count, dtype) all get the asynchronous
//     error cuapi.NCCLInvalidUsage, with both sides named in ncclGetLastError's
//     text (real NCCL hangs or corrupts memory).
//   - A collective whose buffer is not inside one live allocation, or
//     whose send and receive buffers overlap other than in NCCL's in-place
//     form, fails on its rank with cuapi.NCCLUnhandledCudaError or
//     cuapi.NCCLInvalidUsage, and its peers wait (real NCCL faults the kernel or
//     computes garbage).
//   - Asynchronous copies to or from host memory that MemHostAlloc did not
//     return fail with cuapi.CUDAErrorInvalidValue (CUDA runs them synchronously,
//     hiding a missing page-locked buffer and its cost).
//   - A non-blocking operation is queued on its stream only when the
//     caller first polls ncclCommGetAsyncError (or after a few
//     milliseconds): an event recorded before the poll, which NCCL forbids,
//     then completes before the operation, as it could on a GPU.
//   - Stream 0 is one more stream of its context: it does not synchronize
//     implicitly with the context's blocking streams as the legacy stream
//     does, so an order that code needs must be written with events.
//   - MemFree does not wait for queued work: work that reaches freed
//     memory fails (an illegal address) instead of running late.
//   - Several ranks of a communicator may share a device, and device
//     memory is one address space for every device.
//   - Where CUDA needs a current context (copies, StreamCreate) the fake
//     does without one, but to name stream 0: cuapi.CUDAErrorInvalidContext.
//   - ncclGetLastError keeps its text per communicator (NCCL keeps one per
//     process); a handle used after ncclCommAbort returns cuapi.NCCLInvalidUsage
//     and after ncclCommDestroy cuapi.NCCLInvalidArgument (use after free in
//     NCCL).
//
// ncclfake imports comm, nccl and nccl/internal/cuapi. Tests and the
// examples' -fake-gpu import it; the library packages never do
// (internal/rules/imports_test.go holds them to that).
package ncclfake

import (
	"fmt"
	"sync"

	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nccl/internal/cuapi"
)

// Options configures New. The zero value is a machine with eight
// devices, NCCL 2.28.3 and a CUDA 12.2 driver.
type Options struct {
	// Devices is the number of GPUs; if zero, 8. Negative means none: the
	// driver is not initialized and Init fails with CUDA_ERROR_NO_DEVICE,
	// as on a machine with the driver installed and no GPU.
	Devices int
	// Version is NCCL's version code (ncclGetVersion); if zero, 22803.
	Version int
	// DriverVersion is cuDriverGetVersion's; if zero, 12020.
	DriverVersion int
	// ComputeCapability is every device's, 10·major + minor; if zero, 90
	// (Hopper). NCCL reduces the fp8 types from 90 on only.
	ComputeCapability int
}

// New returns a Library whose CUDA driver and NCCL are one in-process
// fake machine (see the package comment for what it does like the real
// ones and what it does differently). Like nccl.Load, it returns the
// driver initialized (unless the machine has no device). Every goroutine
// may use it; it lives as long as it is referenced.
func New(opt Options) *nccl.Library {
	switch {
	case opt.Devices == 0:
		opt.Devices = 8
	case opt.Devices < 0:
		opt.Devices = 0
	}
	if opt.Version == 0 {
		opt.Version = 22803
	}
	if opt.DriverVersion == 0 {
		opt.DriverVersion = 12020
	}
	if opt.ComputeCapability == 0 {
		opt.ComputeCapability = 90
	}
	w := &fakeWorld{
		opt:         opt,
		initialized: opt.Devices > 0,
		nextHandle:  fakeHandleBase,
		nextAddr:    fakeAddrBase,
		ctxs:        make([]*fakeCtx, opt.Devices),
		ctxByHandle: map[cuapi.Context]*fakeCtx{},
		threads:     map[int]*fakeThread{},
		streams:     map[cuapi.Stream]*fakeStream{},
		events:      map[cuapi.Event]*fakeEvent{},
		comms:       map[cuapi.Comm]*fakeComm{},
		ids:         map[cuapi.UniqueID]bool{},
		forming:     map[cuapi.UniqueID]*fakeClique{},
	}
	return cuapi.NewLibrary(cuapi.Table{
		Driver:        fakeDriver{w},
		NCCL:          fakeNCCL{w},
		DriverVersion: opt.DriverVersion,
		NCCLVersion:   opt.Version,
		Where:         fmt.Sprintf("fake (%d GPUs, NCCL %s)", opt.Devices, cuapi.VersionString(opt.Version)),
	}).(*nccl.Library)
}

// Events counts the events alive in the fake machine behind lib (a
// Library that New returned), and how many were ever created: for tests
// of event reuse.
func Events(lib *nccl.Library) (live, created int) {
	w := cuapi.TableOf(lib).Driver.(fakeDriver).w
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.events), w.eventsCreated
}

// fakeWorld is one fake machine: its devices, memory, streams, events and
// communicators.
type fakeWorld struct {
	opt Options

	// mu guards every field below, and the mutable fields of every
	// context, stream, event, communicator and clique of the world. It is
	// never held while waiting, nor while device memory is read or written.
	mu          sync.Mutex
	initialized bool
	nextHandle  uintptr // the last handle given out (streams, events, contexts, comms share the space)
	ctxs        []*fakeCtx
	ctxByHandle map[cuapi.Context]*fakeCtx
	threads     map[int]*fakeThread // by fakeThreadID
	allocs      []*fakeAlloc        // live device allocations, by address
	nextAddr    uintptr             // where the next allocation starts
	liveBytes   uintptr             // the sum of the live allocations' sizes
	pinned      []*fakeAlloc        // live MemHostAlloc buffers, by address
	streams     map[cuapi.Stream]*fakeStream
	events      map[cuapi.Event]*fakeEvent
	// eventsCreated counts EventCreate calls (Events).
	eventsCreated int
	comms         map[cuapi.Comm]*fakeComm // live ones, and the dead kept as tombstones
	ids           map[cuapi.UniqueID]bool  // made by GetUniqueID
	forming       map[cuapi.UniqueID]*fakeClique
	lastErr       string // the text of the last NCCL error, any communicator

	// memMu guards the contents of device memory (the mem of w.allocs).
	// Taken alone, never with mu held.
	memMu sync.Mutex
}

// fakeHandleBase is above CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD
// (2), so no handle the fake gives out is one of CUDA's special values.
const fakeHandleBase = 0x100000

// handle returns a new handle, distinct from every other of the world
// whatever its kind, so that an event passed as a stream is unknown there.
// The caller holds w.mu.
func (w *fakeWorld) handle() uintptr {
	w.nextHandle += 0x10
	return w.nextHandle
}

// fakeThread is the state CUDA and NCCL keep per OS thread.
type fakeThread struct {
	ctx   *fakeCtx // current context (cuCtxSetCurrent); nil for none
	group fakeGroup
}

// thread returns the calling OS thread's state. The caller holds w.mu.
func (w *fakeWorld) thread() *fakeThread {
	id := fakeThreadID()
	t := w.threads[id]
	if t == nil {
		t = &fakeThread{}
		w.threads[id] = t
	}
	return t
}

// fail records an NCCL error's text, on c when c is not nil, and returns
// r. The caller holds w.mu.
func (w *fakeWorld) fail(c *fakeComm, r cuapi.NCCLResult, format string, args ...any) cuapi.NCCLResult {
	text := "fake: " + fmt.Sprintf(format, args...)
	w.lastErr = text
	if c != nil {
		c.lastErr = text
	}
	return r
}
