package ncclfake

import (
	"crypto/rand"
	"slices"
	"sort"
	"unsafe"

	"github.com/hiercomm/hiercomm/nccl/internal/cuapi"
)

// The fake NCCL's communicators: init, split, abort, finalize, destroy,
// their asynchronous state and errors. How a call becomes stream work
// (and groups) is in fake_launch.go, how the ranks meet in fake_meet.go.
//
// A communicator's state, as ncclCommGetAsyncError reports it: its first
// asynchronous error if it has one (it sticks), else cuapi.NCCLInProgress while
// its init (peers still to come), a split of it, a finalize or a
// non-blocking launch is under way, else cuapi.NCCLSuccess. A call on a
// non-blocking communicator whose state is cuapi.NCCLInProgress is refused with
// cuapi.NCCLInvalidArgument, and one on a communicator in error returns the
// error (ncclCommEnsureReady, src/init.cc).

// fakeNCCL implements cuapi.NCCL over a fakeWorld.
type fakeNCCL struct{ w *fakeWorld }

var _ cuapi.NCCL = fakeNCCL{}

// fakeClique is what the ranks of one communicator share.
type fakeClique struct {
	nranks  int
	ids     []cuapi.UniqueID // the unique ids it was made with; none for a split's child
	members []*fakeComm
	arrived int
	ready   chan struct{} // closed when every rank has arrived
	colls   map[uint64]*fakeCollMeet
	p2ps    map[fakeP2PKey]*fakeP2PMeet
	splits  map[uint64]*fakeSplitMeet
}

func newClique(nranks int) *fakeClique {
	return &fakeClique{
		nranks:  nranks,
		members: make([]*fakeComm, nranks),
		ready:   make(chan struct{}),
		colls:   map[uint64]*fakeCollMeet{},
		p2ps:    map[fakeP2PKey]*fakeP2PMeet{},
		splits:  map[uint64]*fakeSplitMeet{},
	}
}

// isReady reports whether every rank of cl has arrived.
func (cl *fakeClique) isReady() bool {
	select {
	case <-cl.ready:
		return true
	default:
		return false
	}
}

// fakeComm is one rank's communicator.
type fakeComm struct {
	h        cuapi.Comm
	clique   *fakeClique
	rank     int
	cfg      cuapi.Config // as made, for a split with no config of its own
	blocking bool
	ctx      *fakeCtx    // current on the thread that made it; nil if none
	private  *fakeStream // stream 0 when ctx is nil

	// dead is what calls on the handle return once it is gone:
	// cuapi.NCCLInvalidUsage after ncclCommAbort, cuapi.NCCLInvalidArgument after
	// ncclCommDestroy; cuapi.NCCLSuccess while it lives. aborted is closed then.
	dead    cuapi.NCCLResult
	aborted chan struct{}

	asyncErr   cuapi.NCCLResult // the first asynchronous error; sticks
	lastErr    string
	launch     *fakeLaunch // a non-blocking launch not yet queued
	splitting  bool        // a non-blocking split of it is under way
	finalizing bool
	finalized  bool
	inflight   int           // its stream operations queued and not yet ended
	drained    chan struct{} // closed when inflight drops to 0; nil when no one waits

	premul   []*fakePreMul // PreMulSum ops by slot (fake_premul.go); nil: free
	collSeq  uint64        // collectives launched
	sendSeq  []uint64      // sends launched, per peer
	recvSeq  []uint64      // receives launched, per peer
	splitSeq uint64        // splits called
}

// newComm makes rank's communicator in cl. The caller holds w.mu.
func (w *fakeWorld) newComm(cl *fakeClique, rank int, cfg cuapi.Config, blocking bool, ctx *fakeCtx) *fakeComm {
	c := &fakeComm{
		h: cuapi.Comm(w.handle()), clique: cl, rank: rank, cfg: cfg, blocking: blocking, ctx: ctx,
		aborted: make(chan struct{}),
		sendSeq: make([]uint64, cl.nranks), recvSeq: make([]uint64, cl.nranks),
	}
	w.comms[c.h] = c
	cl.members[rank] = c
	cl.arrived++
	if cl.arrived == cl.nranks {
		close(cl.ready)
	}
	return c
}

// comm resolves a handle that must still be live. The caller holds w.mu.
func (w *fakeWorld) comm(h cuapi.Comm, call string) (*fakeComm, cuapi.NCCLResult) {
	c := w.comms[h]
	switch {
	case c == nil:
		return nil, w.fail(nil, cuapi.NCCLInvalidArgument, "%s: %#x is not a communicator", call, uintptr(h))
	case c.dead == cuapi.NCCLInvalidUsage:
		return nil, w.fail(c, c.dead, "%s on rank %d: the communicator was aborted (ncclCommAbort frees it: this is a use after free)", call, c.rank)
	case c.dead != cuapi.NCCLSuccess:
		return nil, w.fail(c, c.dead, "%s on rank %d: the communicator was destroyed", call, c.rank)
	}
	return c, cuapi.NCCLSuccess
}

// state is c's asynchronous state. The caller holds w.mu.
func (w *fakeWorld) state(c *fakeComm) cuapi.NCCLResult {
	if c.asyncErr != cuapi.NCCLSuccess {
		return c.asyncErr
	}
	if c.finalizing && c.inflight == 0 {
		c.finalizing, c.finalized = false, true
	}
	if !c.clique.isReady() || c.splitting || c.launch != nil || c.finalizing {
		return cuapi.NCCLInProgress
	}
	return cuapi.NCCLSuccess
}

// onComm runs f with w locked on the communicator h names (ready: one
// that takes operations, see ready), or returns why there is none.
func (w *fakeWorld) onComm(h cuapi.Comm, call string, ready bool, f func(c *fakeComm) cuapi.NCCLResult) cuapi.NCCLResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	look := w.comm
	if ready {
		look = w.ready
	}
	c, r := look(h, call)
	if r != cuapi.NCCLSuccess {
		return r
	}
	return f(c)
}

// ready resolves a handle for a call that uses the communicator, as
// ncclCommEnsureReady does: it must be live, its state not in progress
// and not in error. The caller holds w.mu.
func (w *fakeWorld) ready(h cuapi.Comm, call string) (*fakeComm, cuapi.NCCLResult) {
	c, r := w.comm(h, call)
	if r != cuapi.NCCLSuccess {
		return nil, r
	}
	switch s := w.state(c); {
	case s == cuapi.NCCLInProgress:
		return nil, w.fail(c, cuapi.NCCLInvalidArgument, "%s on rank %d: the previous operation on this communicator has not returned ncclSuccess yet (poll ncclCommGetAsyncError until it stops reporting ncclInProgress)", call, c.rank)
	case s != cuapi.NCCLSuccess:
		return nil, s
	case c.finalized:
		return nil, w.fail(c, cuapi.NCCLInvalidUsage, "%s on rank %d: the communicator was finalized", call, c.rank)
	}
	return c, cuapi.NCCLSuccess
}

// parseConfig reads a config as NCCL does: nil is the default (blocking);
// the size must be set and no larger than the struct, the magic must be
// NCCL_API_MAGIC; configs older than 2.14 have no blocking field.
func parseConfig(cfg *cuapi.Config) (cuapi.Config, bool, string) {
	if cfg == nil {
		return cuapi.NewConfig(true), true, ""
	}
	c := *cfg
	switch {
	case c.Size == 0 || c.Size > unsafe.Sizeof(cuapi.Config{}):
		return c, false, "config size is not set or too large (use NCCL_CONFIG_INITIALIZER)"
	case c.Magic != cuapi.APIMagic:
		return c, false, "ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER (bad magic)"
	case c.Version < 21400:
		c.Blocking = 1
	}
	switch c.Blocking {
	case 0:
		return c, false, ""
	case 1, cuapi.ConfigUndef:
		return c, true, ""
	}
	return c, false, "config blocking must be 0 or 1"
}

func (n fakeNCCL) GetVersion(v *int32) cuapi.NCCLResult {
	if v == nil {
		return cuapi.NCCLInvalidArgument
	}
	*v = int32(n.w.opt.Version)
	return cuapi.NCCLSuccess
}

// GetUniqueID returns 128 random bytes, which CommInitRankScalable
// accepts from then on.
func (n fakeNCCL) GetUniqueID(id *cuapi.UniqueID) cuapi.NCCLResult {
	w := n.w
	if id == nil {
		return cuapi.NCCLInvalidArgument
	}
	if _, err := rand.Read(id[:]); err != nil {
		return cuapi.NCCLSystemError
	}
	w.mu.Lock()
	w.ids[*id] = true
	w.mu.Unlock()
	return cuapi.NCCLSuccess
}

// CommInitRankScalable makes rank's communicator of the nranks ranks that
// call it with the same ids (they meet by ids[0]; the ids must be ones
// GetUniqueID made). *comm is set before it returns, as in NCCL. Blocking,
// it returns once every rank has called; non-blocking, it returns
// cuapi.NCCLInProgress, and the state stays so until every rank has called.
func (n fakeNCCL) CommInitRankScalable(comm *cuapi.Comm, nranks, rank int32, nIDs int32, ids *cuapi.UniqueID, cfg *cuapi.Config) cuapi.NCCLResult {
	w := n.w
	w.mu.Lock()
	defer w.mu.Unlock()
	const call = "ncclCommInitRankScalable"
	conf, blocking, bad := parseConfig(cfg)
	switch {
	case comm == nil || ids == nil:
		return w.fail(nil, cuapi.NCCLInvalidArgument, "%s: comm and commId must not be NULL", call)
	case bad != "":
		return w.fail(nil, cuapi.NCCLInvalidArgument, "%s: %s", call, bad)
	case nranks < 1 || rank < 0 || rank >= nranks:
		return w.fail(nil, cuapi.NCCLInvalidArgument, "%s: rank %d is not in [0, nranks=%d)", call, rank, nranks)
	case nIDs < 1 || nIDs > nranks:
		return w.fail(nil, cuapi.NCCLInvalidArgument, "%s: nId %d is not in [1, nranks=%d]", call, nIDs, nranks)
	}
	list := slices.Clone(unsafe.Slice(ids, nIDs))
	for i, id := range list {
		if !w.ids[id] {
			return w.fail(nil, cuapi.NCCLInvalidArgument, "%s: rank %d: unique id %d of %d was not made by ncclGetUniqueId (of this Library)", call, rank, i, nIDs)
		}
	}
	cl := w.forming[list[0]]
	if cl == nil {
		cl = newClique(int(nranks))
		cl.ids = list
		w.forming[list[0]] = cl
	}
	switch {
	case cl.nranks != int(nranks):
		return w.fail(nil, cuapi.NCCLInvalidUsage, "%s: rank %d says nranks=%d but a rank before it said %d", call, rank, nranks, cl.nranks)
	case !slices.Equal(cl.ids, list):
		return w.fail(nil, cuapi.NCCLInvalidUsage, "%s: rank %d passes other unique ids than a rank before it", call, rank)
	case cl.members[rank] != nil:
		return w.fail(nil, cuapi.NCCLInvalidUsage, "%s: rank %d joined twice", call, rank)
	}
	c := w.newComm(cl, int(rank), conf, blocking, w.thread().ctx)
	if cl.isReady() {
		delete(w.forming, list[0])
	}
	*comm = c.h
	if !blocking {
		return cuapi.NCCLInProgress
	}
	w.mu.Unlock()
	select {
	case <-cl.ready:
	case <-c.aborted:
	}
	w.mu.Lock()
	if c.dead != cuapi.NCCLSuccess {
		return w.fail(c, cuapi.NCCLInvalidUsage, "%s: rank %d was aborted during its init", call, rank)
	}
	return cuapi.NCCLSuccess
}

// fakeSplitMeet is one CommSplit of a clique, numbered by call.
type fakeSplitMeet struct {
	parts    []*fakeSplitPart // by parent rank; nil until it calls
	arrived  int
	poisoned bool          // a rank that called was aborted: it never completes
	done     chan struct{} // closed when the children are made
}

type fakeSplitPart struct {
	comm     *fakeComm
	color    int32
	key      int32
	out      *cuapi.Comm
	cfg      cuapi.Config
	blocking bool
}

// CommSplit is a collective over the parent: once every parent rank has
// called, the ranks of each color become a child communicator, ordered by
// key, then parent rank; cuapi.SplitNoColor gets none (*out stays 0). *out
// is set to 0 at once and to the child when the split completes, as NCCL
// does (ncclCommInitChildComm, ncclCommInitRankFunc): with a non-blocking
// parent that is after the call returned cuapi.NCCLInProgress, and the parent's
// state is cuapi.NCCLInProgress until then, so the caller polls the parent and
// must keep out valid meanwhile. A nil cfg inherits the parent's config.
func (n fakeNCCL) CommSplit(h cuapi.Comm, color, key int32, out *cuapi.Comm, cfg *cuapi.Config) cuapi.NCCLResult {
	w := n.w
	const call = "ncclCommSplit"
	return w.onComm(h, call, true, func(c *fakeComm) cuapi.NCCLResult {
		if out == nil {
			return w.fail(c, cuapi.NCCLInvalidArgument, "%s on rank %d: newcomm must not be NULL", call, c.rank)
		}
		*out = 0
		if color < 0 && color != cuapi.SplitNoColor {
			return w.fail(c, cuapi.NCCLInvalidArgument, "%s on rank %d: color %d is negative and not NCCL_SPLIT_NOCOLOR", call, c.rank, color)
		}
		part := &fakeSplitPart{comm: c, color: color, key: key, out: out, cfg: c.cfg, blocking: c.blocking}
		if cfg != nil {
			conf, blocking, bad := parseConfig(cfg)
			if bad != "" {
				return w.fail(c, cuapi.NCCLInvalidArgument, "%s on rank %d: %s", call, c.rank, bad)
			}
			part.cfg, part.blocking = conf, blocking
		}
		cl := c.clique
		seq := c.splitSeq
		c.splitSeq++
		m := cl.splits[seq]
		if m == nil {
			m = &fakeSplitMeet{parts: make([]*fakeSplitPart, cl.nranks), done: make(chan struct{})}
			cl.splits[seq] = m
		}
		m.parts[c.rank] = part
		m.arrived++
		if !c.blocking {
			c.splitting = true
		}
		if m.arrived == cl.nranks && !m.poisoned {
			delete(cl.splits, seq)
			w.completeSplit(m)
		}
		if !c.blocking {
			return cuapi.NCCLInProgress
		}
		w.mu.Unlock()
		select {
		case <-m.done:
		case <-c.aborted:
		}
		w.mu.Lock()
		if c.dead != cuapi.NCCLSuccess {
			return w.fail(c, cuapi.NCCLInvalidUsage, "%s on rank %d: aborted during the split", call, c.rank)
		}
		return cuapi.NCCLSuccess
	})
}

// completeSplit makes the children of a split every rank has called. The
// caller holds w.mu.
func (w *fakeWorld) completeSplit(m *fakeSplitMeet) {
	byColor := map[int32][]*fakeSplitPart{}
	for _, p := range m.parts {
		if p.color != cuapi.SplitNoColor {
			byColor[p.color] = append(byColor[p.color], p)
		}
	}
	for _, ps := range byColor {
		sort.SliceStable(ps, func(i, j int) bool { // parts are in parent-rank order already
			return ps[i].key < ps[j].key
		})
		cl := newClique(len(ps))
		for i, p := range ps {
			child := w.newComm(cl, i, p.cfg, p.blocking, p.comm.ctx)
			*p.out = child.h
		}
	}
	for _, p := range m.parts {
		p.comm.splitting = false
	}
	close(m.done)
}

// CommFinalize flushes: once every operation queued on the communicator
// has ended, the state is cuapi.NCCLSuccess (blocking: the call waits for it)
// and the communicator takes no more operations.
func (n fakeNCCL) CommFinalize(h cuapi.Comm) cuapi.NCCLResult {
	w := n.w
	return w.onComm(h, "ncclCommFinalize", true, func(c *fakeComm) cuapi.NCCLResult {
		if !c.blocking {
			c.finalizing = true
			return cuapi.NCCLInProgress
		}
		w.waitDrained(c)
		c.finalized = true
		return cuapi.NCCLSuccess
	})
}

// CommDestroy waits for the communicator's queued operations to end (as
// NCCL's destroy does, so a peer that never comes makes it wait for
// ever: abort instead), then frees it.
func (n fakeNCCL) CommDestroy(h cuapi.Comm) cuapi.NCCLResult {
	w := n.w
	return w.onComm(h, "ncclCommDestroy", false, func(c *fakeComm) cuapi.NCCLResult {
		if c.launch != nil {
			w.launchNow(c)
		}
		w.waitDrained(c)
		if c.dead == cuapi.NCCLSuccess {
			w.kill(c, cuapi.NCCLInvalidArgument)
		}
		return cuapi.NCCLSuccess
	})
}

// waitDrained waits, releasing w.mu, until c has no operation queued or
// running, or c is aborted. The caller holds w.mu.
func (w *fakeWorld) waitDrained(c *fakeComm) {
	for c.inflight > 0 && c.dead == cuapi.NCCLSuccess {
		if c.drained == nil {
			c.drained = make(chan struct{})
		}
		ch := c.drained
		w.mu.Unlock()
		select {
		case <-ch:
		case <-c.aborted:
		}
		w.mu.Lock()
	}
}

// CommAbort frees the communicator at once: every operation of it queued
// or waiting for peers ends (streams drain, events complete), an init or
// split under way is dropped. Its peers are not told: those waiting for
// it in an operation wait until they are aborted too, as in NCCL.
func (n fakeNCCL) CommAbort(h cuapi.Comm) cuapi.NCCLResult {
	w := n.w
	return w.onComm(h, "ncclCommAbort", false, func(c *fakeComm) cuapi.NCCLResult {
		w.kill(c, cuapi.NCCLInvalidUsage)
		return cuapi.NCCLSuccess
	})
}

// kill ends c: calls on it return dead from now on, its operations end,
// and every meeting it joined and that has not completed never will. The
// caller holds w.mu.
func (w *fakeWorld) kill(c *fakeComm, dead cuapi.NCCLResult) {
	c.dead = dead
	close(c.aborted)
	if c.launch != nil {
		c.launch.timer.Stop()
		c.launch = nil
	}
	c.splitting = false
	cl := c.clique
	for _, m := range cl.colls {
		if m.parts[c.rank] != nil {
			m.poisoned = true
		}
	}
	for _, m := range cl.p2ps {
		if m.send != nil && m.send.comm == c || m.recv != nil && m.recv.comm == c {
			m.poisoned = true
		}
	}
	for _, m := range cl.splits {
		if m.parts[c.rank] != nil {
			m.poisoned = true
		}
	}
}

// CommGetAsyncError reports the state (see the top of this file). A
// non-blocking launch waiting for this poll is queued now.
func (n fakeNCCL) CommGetAsyncError(h cuapi.Comm, r *cuapi.NCCLResult) cuapi.NCCLResult {
	w := n.w
	return w.onComm(h, "ncclCommGetAsyncError", false, func(c *fakeComm) cuapi.NCCLResult {
		if r == nil {
			return w.fail(c, cuapi.NCCLInvalidArgument, "ncclCommGetAsyncError: asyncError must not be NULL")
		}
		if c.launch != nil {
			w.launchNow(c)
		}
		*r = w.state(c)
		return cuapi.NCCLSuccess
	})
}

// fakeNCCLErrors are ncclGetErrorString's texts (src/init.cc).
var fakeNCCLErrors = map[cuapi.NCCLResult]string{
	cuapi.NCCLSuccess:            "no error",
	cuapi.NCCLUnhandledCudaError: "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
	cuapi.NCCLSystemError:        "unhandled system error (run with NCCL_DEBUG=INFO for details)",
	cuapi.NCCLInternalError:      "internal error - please report this issue to the NCCL developers",
	cuapi.NCCLInvalidArgument:    "invalid argument (run with NCCL_DEBUG=WARN for details)",
	cuapi.NCCLInvalidUsage:       "invalid usage (run with NCCL_DEBUG=WARN for details)",
	cuapi.NCCLRemoteError:        "remote process exited or there was a network error",
	cuapi.NCCLInProgress:         "NCCL operation in progress",
	cuapi.NCCLTimeout:            "timeout",
}

func (n fakeNCCL) GetErrorString(r cuapi.NCCLResult) string {
	if s, ok := fakeNCCLErrors[r]; ok {
		return s
	}
	return "unknown result code"
}

// GetLastError is the text of the last error on the communicator (the
// last of the process for 0 or an unknown handle).
func (n fakeNCCL) GetLastError(h cuapi.Comm) string {
	w := n.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if c := w.comms[h]; c != nil {
		return c.lastErr
	}
	return w.lastErr
}
