package ncclfake

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hiercomm/hiercomm/nccl/internal/cuapi"
)

// The fake's NCCL calls: how a call becomes work on a stream (and
// groups). How the ranks' work meets is in fake_meet.go.
//
// A call is checked (communicator ready, arguments as NCCL's ArgsCheck
// checks them, the stream) and becomes an issue. Outside a group it is
// launched at once (blocking communicator) or at the first poll
// (non-blocking); in a group, at the outermost GroupEnd, all the
// communicator's issues together. Launching numbers the issues (the k-th
// collective of the communicator; the k-th send to a peer, the k-th
// receive from it) and queues one stream operation that runs them all at
// once; when the issues use several streams, the operation first waits
// for the work queued on the others, and the others then wait for it, as
// NCCL joins the streams of a group.

// fakeKind is an NCCL operation.
type fakeKind uint8

const (
	fakeAllReduce fakeKind = iota
	fakeBroadcast
	fakeReduce
	fakeAllGather
	fakeReduceScatter
	fakeSend
	fakeRecv
)

var fakeKindNames = [...]string{"ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather", "ncclReduceScatter", "ncclSend", "ncclRecv"}

func (k fakeKind) String() string { return fakeKindNames[k] }

func (k fakeKind) reduces() bool {
	return k == fakeAllReduce || k == fakeReduce || k == fakeReduceScatter
}

func (k fakeKind) rooted() bool { return k == fakeBroadcast || k == fakeReduce }

func (k fakeKind) p2p() bool { return k == fakeSend || k == fakeRecv }

// fakeIssue is one NCCL operation called on a communicator.
type fakeIssue struct {
	kind       fakeKind
	send, recv uintptr // Send's buffer is send, Recv's is recv
	count      uintptr // per rank: AllGather's send count, ReduceScatter's recv count
	dt         cuapi.DataType
	op         cuapi.RedOp
	scalar     []byte // a PreMulSum op's scalar, captured when it is called
	root       int    // Broadcast's and Reduce's root; Send's and Recv's peer
	stream     cuapi.Stream
	seq        uint64 // set at launch: the collective's number, or the pair's
}

func (is *fakeIssue) String() string {
	s := fmt.Sprintf("%v(count=%d, %s", is.kind, is.count, fakeTypeName(is.dt))
	if is.kind.reduces() {
		s += ", " + fakeOpName(is.op)
	}
	if is.kind.rooted() {
		s += fmt.Sprintf(", root=%d", is.root)
	}
	if is.kind.p2p() {
		s += fmt.Sprintf(", peer=%d", is.root)
	}
	return s + ")"
}

func (n fakeNCCL) AllReduce(send, recv uintptr, count uintptr, dt cuapi.DataType, op cuapi.RedOp, comm cuapi.Comm, s cuapi.Stream) cuapi.NCCLResult {
	return n.w.issue(comm, &fakeIssue{kind: fakeAllReduce, send: send, recv: recv, count: count, dt: dt, op: op, stream: s})
}

func (n fakeNCCL) Broadcast(send, recv uintptr, count uintptr, dt cuapi.DataType, root int32, comm cuapi.Comm, s cuapi.Stream) cuapi.NCCLResult {
	return n.w.issue(comm, &fakeIssue{kind: fakeBroadcast, send: send, recv: recv, count: count, dt: dt, root: int(root), stream: s})
}

func (n fakeNCCL) Reduce(send, recv uintptr, count uintptr, dt cuapi.DataType, op cuapi.RedOp, root int32, comm cuapi.Comm, s cuapi.Stream) cuapi.NCCLResult {
	return n.w.issue(comm, &fakeIssue{kind: fakeReduce, send: send, recv: recv, count: count, dt: dt, op: op, root: int(root), stream: s})
}

func (n fakeNCCL) AllGather(send, recv uintptr, sendCount uintptr, dt cuapi.DataType, comm cuapi.Comm, s cuapi.Stream) cuapi.NCCLResult {
	return n.w.issue(comm, &fakeIssue{kind: fakeAllGather, send: send, recv: recv, count: sendCount, dt: dt, stream: s})
}

func (n fakeNCCL) ReduceScatter(send, recv uintptr, recvCount uintptr, dt cuapi.DataType, op cuapi.RedOp, comm cuapi.Comm, s cuapi.Stream) cuapi.NCCLResult {
	return n.w.issue(comm, &fakeIssue{kind: fakeReduceScatter, send: send, recv: recv, count: recvCount, dt: dt, op: op, stream: s})
}

func (n fakeNCCL) Send(buf uintptr, count uintptr, dt cuapi.DataType, peer int32, comm cuapi.Comm, s cuapi.Stream) cuapi.NCCLResult {
	return n.w.issue(comm, &fakeIssue{kind: fakeSend, send: buf, count: count, dt: dt, root: int(peer), stream: s})
}

func (n fakeNCCL) Recv(buf uintptr, count uintptr, dt cuapi.DataType, peer int32, comm cuapi.Comm, s cuapi.Stream) cuapi.NCCLResult {
	return n.w.issue(comm, &fakeIssue{kind: fakeRecv, recv: buf, count: count, dt: dt, root: int(peer), stream: s})
}

// issue checks a call and launches it, defers it, or adds it to the
// calling thread's group. An argument error on a non-blocking
// communicator also becomes its asynchronous error, as in NCCL; in a
// group it becomes the group's error too.
func (w *fakeWorld) issue(h cuapi.Comm, is *fakeIssue) cuapi.NCCLResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := &w.thread().group
	note := func(r cuapi.NCCLResult) cuapi.NCCLResult {
		if g.depth > 0 && g.err == cuapi.NCCLSuccess {
			g.err = r
		}
		return r
	}
	c, r := w.ready(h, is.kind.String())
	if r != cuapi.NCCLSuccess {
		return note(r)
	}
	bad := func(r cuapi.NCCLResult, why string) cuapi.NCCLResult {
		w.fail(c, r, "%v on rank %d: %s", is.kind, c.rank, why)
		if !c.blocking {
			c.asyncErr = r
		}
		return note(r)
	}
	if why := checkIssue(is, c.clique.nranks); why != "" {
		return bad(cuapi.NCCLInvalidArgument, why)
	}
	if !w.typeOK(is.dt) {
		return bad(cuapi.NCCLInvalidArgument, fmt.Sprintf("invalid type %d (%s needs NCCL %s)", is.dt, fakeTypeName(is.dt), cuapi.VersionString(cuapi.FP8VersionCode)))
	}
	if is.kind.reduces() && (is.dt == cuapi.NCCLFloat8e4m3 || is.dt == cuapi.NCCLFloat8e5m2) && w.opt.ComputeCapability < 90 {
		return bad(cuapi.NCCLInvalidArgument, "FP8 reduction support begins with sm90 capable devices") // enqueue.cc's check of comm->minCompCap
	}
	if is.kind.reduces() && is.op >= cuapi.NCCLNumOps {
		p := c.userOp(is.op)
		switch {
		case p == nil:
			return bad(cuapi.NCCLInvalidArgument, fmt.Sprintf("invalid reduction operation %d", is.op))
		case p.dt != is.dt:
			return bad(cuapi.NCCLInvalidArgument, fmt.Sprintf("reduction operation %d was made for %s, not %s", is.op, fakeTypeName(p.dt), fakeTypeName(is.dt)))
		}
		is.scalar = p.scalar
	}
	if _, why := w.opStream(c, is.stream); why != "" {
		return bad(cuapi.NCCLUnhandledCudaError, why)
	}
	if is.count == 0 && !is.kind.p2p() {
		return cuapi.NCCLSuccess // empty collectives are discarded (taskAppend)
	}
	if g.depth == 0 {
		return w.launchOrDefer(c, []*fakeIssue{is})
	}
	b := 0
	if c.blocking {
		b = 1
	}
	switch {
	case g.blocking == -1:
		g.blocking = b
	case g.blocking != b:
		w.fail(c, cuapi.NCCLInvalidArgument, "%v on rank %d: blocking and nonblocking communicators are not allowed in the same group", is.kind, c.rank)
		return note(cuapi.NCCLInvalidArgument)
	}
	if _, ok := g.issues[c]; !ok {
		g.comms = append(g.comms, c)
	}
	g.issues[c] = append(g.issues[c], is)
	return cuapi.NCCLSuccess
}

// checkIssue is NCCL's ArgsCheck: datatype, reduction op, root or peer.
func checkIssue(is *fakeIssue, nranks int) string {
	switch {
	case !fakeTypeOK(is.dt):
		return fmt.Sprintf("invalid type %d", is.dt)
	case is.kind.reduces() && is.op < cuapi.NCCLSum: // ops from cuapi.NCCLNumOps on are checked by issue
		return fmt.Sprintf("invalid reduction operation %d", is.op)
	case (is.kind.rooted() || is.kind.p2p()) && (is.root < 0 || is.root >= nranks):
		return fmt.Sprintf("invalid root %d (root should be in the 0..%d range)", is.root, nranks-1)
	}
	return ""
}

// opStream resolves the stream of an operation on c: stream 0 is stream 0
// of c's context (NCCL launches on its device), or c's own stand-in when
// c was made on a thread with no current context. The caller holds w.mu.
func (w *fakeWorld) opStream(c *fakeComm, s cuapi.Stream) (*fakeStream, string) {
	if s == 0 || s == fakeStreamLegacy {
		if c.ctx != nil {
			return c.ctx.legacyStream(), ""
		}
		if c.private == nil {
			c.private = &fakeStream{}
		}
		return c.private, ""
	}
	st := w.streams[s]
	switch {
	case st == nil:
		return nil, fmt.Sprintf("stream %#x is not a live stream", uintptr(s))
	case st.ctx != nil && c.ctx != nil && st.ctx != c.ctx:
		return nil, fmt.Sprintf("stream %#x is of device %d but the communicator is on device %d", uintptr(s), st.ctx.dev, c.ctx.dev)
	}
	return st, ""
}

// fakeGroup is a thread's group state (NCCL's is thread-local).
type fakeGroup struct {
	depth    int
	err      cuapi.NCCLResult // the first error of a call in the group; GroupEnd returns it
	blocking int              // -1 until a communicator joins, then its blocking (0 or 1)
	comms    []*fakeComm
	issues   map[*fakeComm][]*fakeIssue
}

func (n fakeNCCL) GroupStart() cuapi.NCCLResult {
	w := n.w
	w.mu.Lock()
	defer w.mu.Unlock()
	g := &w.thread().group
	if g.depth == 0 {
		*g = fakeGroup{blocking: -1, issues: map[*fakeComm][]*fakeIssue{}}
	}
	g.depth++
	return cuapi.NCCLSuccess
}

// GroupEnd launches what the group collected when the outermost group
// ends: each communicator's operations as one stream operation in which
// they all run at once (so a grouped send and receive never deadlock).
// Non-blocking communicators return cuapi.NCCLInProgress and launch as their
// single calls do.
func (n fakeNCCL) GroupEnd() cuapi.NCCLResult {
	w := n.w
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.thread()
	g := &t.group
	if g.depth == 0 {
		return w.fail(nil, cuapi.NCCLInvalidUsage, "ncclGroupEnd: not in a group call (NCCL's group state is per OS thread: call ncclGroupStart, the operations and ncclGroupEnd on one locked thread)")
	}
	g.depth--
	if g.depth > 0 {
		return cuapi.NCCLSuccess
	}
	done := *g
	t.group = fakeGroup{}
	if done.err != cuapi.NCCLSuccess {
		return done.err
	}
	res := cuapi.NCCLSuccess
	for _, c := range done.comms {
		if c.dead != cuapi.NCCLSuccess {
			continue
		}
		if w.launchOrDefer(c, done.issues[c]) == cuapi.NCCLInProgress {
			res = cuapi.NCCLInProgress
		}
	}
	return res
}

// fakeLaunchDelay is how long a non-blocking launch waits for the
// caller's first ncclCommGetAsyncError before it is queued anyway.
const fakeLaunchDelay = 5 * time.Millisecond

// fakeLaunch is a non-blocking communicator's operations (one call or a
// group) waiting to be queued on their streams.
type fakeLaunch struct {
	issues []*fakeIssue
	timer  *time.Timer
}

// launchOrDefer launches issues on a blocking communicator; on a
// non-blocking one it leaves them for the first poll (or fakeLaunchDelay)
// and returns cuapi.NCCLInProgress. The caller holds w.mu.
func (w *fakeWorld) launchOrDefer(c *fakeComm, issues []*fakeIssue) cuapi.NCCLResult {
	if c.blocking {
		w.launch(c, issues)
		return cuapi.NCCLSuccess
	}
	l := &fakeLaunch{issues: issues}
	c.launch = l
	l.timer = time.AfterFunc(fakeLaunchDelay, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if c.launch == l {
			w.launchNow(c)
		}
	})
	return cuapi.NCCLInProgress
}

// launchNow queues c's deferred launch. The caller holds w.mu.
func (w *fakeWorld) launchNow(c *fakeComm) {
	l := c.launch
	c.launch = nil
	l.timer.Stop()
	w.launch(c, l.issues)
}

// launch numbers issues and queues them on their streams as one
// operation. The caller holds w.mu.
func (w *fakeWorld) launch(c *fakeComm, issues []*fakeIssue) {
	streams := make([]*fakeStream, len(issues))
	for i, is := range issues {
		st, why := w.opStream(c, is.stream)
		if why != "" { // destroyed since the call
			r := w.fail(c, cuapi.NCCLUnhandledCudaError, "%v on rank %d: %s", is.kind, c.rank, why)
			if c.asyncErr == cuapi.NCCLSuccess {
				c.asyncErr = r
			}
			return
		}
		streams[i] = st
	}
	for _, is := range issues {
		switch is.kind {
		case fakeSend:
			is.seq = c.sendSeq[is.root]
			c.sendSeq[is.root]++
		case fakeRecv:
			is.seq = c.recvSeq[is.root]
			c.recvSeq[is.root]++
		default:
			is.seq = c.collSeq
			c.collSeq++
		}
	}
	var others []*fakeStream
	var waits []*fakeOp
	for _, st := range streams[1:] {
		if st != streams[0] && !slices.Contains(others, st) {
			others = append(others, st)
			waits = append(waits, st.last)
		}
	}
	c.inflight++
	op := w.enqueue(streams[0], func(sticky cuapi.CUResult) cuapi.CUResult {
		w.runIssues(c, issues, sticky)
		return cuapi.CUDASuccess
	}, waits...)
	for _, st := range others {
		w.enqueue(st, nil, op)
	}
}

// runIssues is the stream operation of launched issues: it runs them all
// at once and records the first failure as c's asynchronous error.
func (w *fakeWorld) runIssues(c *fakeComm, issues []*fakeIssue, sticky cuapi.CUResult) {
	type outcome struct {
		r    cuapi.NCCLResult
		text string
	}
	outs := make([]outcome, len(issues))
	switch {
	case sticky != cuapi.CUDASuccess:
		outs[0] = outcome{cuapi.NCCLUnhandledCudaError, fmt.Sprintf("%v on rank %d: its stream failed earlier (CUresult %d)", issues[0].kind, c.rank, sticky)}
	case len(issues) == 1:
		outs[0].r, outs[0].text = w.run(c, issues[0])
	default:
		var wg sync.WaitGroup
		for i, is := range issues {
			wg.Go(func() { outs[i].r, outs[i].text = w.run(c, is) })
		}
		wg.Wait()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, o := range outs {
		if o.r != cuapi.NCCLSuccess && c.dead == cuapi.NCCLSuccess && c.asyncErr == cuapi.NCCLSuccess {
			c.asyncErr = w.fail(c, o.r, "%s", o.text)
		}
	}
	c.inflight--
	if c.inflight == 0 && c.drained != nil {
		close(c.drained)
		c.drained = nil
	}
}

// run runs one issue on rank c: cuapi.NCCLSuccess with no text if c was
// aborted.
func (w *fakeWorld) run(c *fakeComm, is *fakeIssue) (cuapi.NCCLResult, string) {
	if is.kind.p2p() {
		return w.runP2P(c, is)
	}
	return w.runColl(c, is)
}
