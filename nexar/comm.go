package nexar

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/internal/hoptrace"
	"github.com/hiercomm/hiercomm/nexar/internal/timerpool"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// Comm is a nexar communicator: the flat comm.Communicator over a Transport.
// A world Comm owns its Transport; the communicators Split makes from it
// share the Transport and are told apart by their id in every frame.
type Comm struct {
	tier.Blocking
	w       *world
	id      uint64
	name    string
	members []int // comm rank → world rank
	index   []int // world rank → comm rank, or -1
	rank    int
	opt     Options
	owner   bool            // the world Comm: Close closes the transport.Transport (see holds)
	sent    []atomic.Uint64 // data and point-to-point frames sent to each rank (transport.FrameClosed)
	// schedules keeps the schedules of recent calls (collective.go).
	schedules scheduleCache
	checks    tier.CheckCache      // the calls this rank found good lately
	exec      *tier.Exec[job]      // numbers and runs the collectives (guarded by mu)
	rec       *tier.FlightRecorder // nil unless Options.FlightRecorder
	done      chan struct{}        // closed by Close: every wait ends with comm.ErrClosed
	notes     lastWords            // control frames being sent (failure notices, probe answers); see note
	shrink    shrinkBox            // Shrink's agreement (shrink.go)
	census    census               // the progress census (progress.go)
	// holds: a communicator made by Shrink keeps the transport open, as
	// the world Comm does; the last of them to close closes it. Set
	// before the communicator is registered.
	holds bool

	mu sync.Mutex // guards everything below
	// failure decides how collectives end and when the communicator is
	// aborted (tier.Failure); fed under mu (input, applyLocked).
	failure tier.Failure
	ops     map[uint64]*op // collectives in flight, by sequence number
	// spareOps are finished ops that succeeded, for newOp to reuse: none
	// is referenced from anywhere else (its watch of the caller's
	// context was stopped before it ran, its done never closed).
	spareOps []*op
	arrived  map[mkey]frame      // frames that arrived before anyone waited for them
	waiters  map[mkey]chan frame // receives waiting for a frame (buffered, capacity 1)
	posted   map[mkey]*posted    // Recvs started with Start, waiting for their frame (posted.go)
	// landings are the waiting receives' memory for their frames, by the
	// key they wait for (landing.go); one has its waiter in waiters.
	landings map[mkey]*landing
	// watching: the watcher of the posted Recvs runs.
	watching bool
	sendSeq  map[p2pKey]uint64 // next message number to send, by (peer, tag)
	recvSeq  map[p2pKey]uint64 // next message number to receive, by (peer, tag)
	// got counts the data and point-to-point frames that arrived from each
	// rank; left is, for a rank that closed its side, the number it sent
	// (transport.FrameClosed), else -1; leftCh is closed and replaced when a waiter
	// may have to give up on such a rank.
	got    []uint64
	left   []int64
	leftCh chan struct{}
	// abortedCh is closed when the failure machine aborts the
	// communicator (comm.Control).
	abortedCh chan struct{}
	closed    bool
	splits    uint64 // number of Split calls, for child names
}

// mkey names one frame of one communicator.
type mkey struct {
	kind transport.FrameKind
	seq  uint64
	step uint32
	src  int32
	tag  int32
}

type p2pKey struct{ peer, tag int }

func newComm(w *world, id uint64, name string, members []int, opt Options, owner bool) *Comm {
	c := &Comm{
		w: w, id: id, name: name, members: members, opt: opt, owner: owner,
		index:     make([]int, w.size),
		ops:       map[uint64]*op{},
		arrived:   map[mkey]frame{},
		waiters:   map[mkey]chan frame{},
		posted:    map[mkey]*posted{},
		landings:  map[mkey]*landing{},
		sendSeq:   map[p2pKey]uint64{},
		recvSeq:   map[p2pKey]uint64{},
		done:      make(chan struct{}),
		leftCh:    make(chan struct{}),
		abortedCh: make(chan struct{}),
	}
	if !owner {
		// Only a Split child announces its close by counts (a world's
		// close is the transport's close protocol).
		c.sent = make([]atomic.Uint64, len(members))
		c.got = make([]uint64, len(members))
		c.left = make([]int64, len(members))
		for i := range c.left {
			c.left[i] = -1
		}
	}
	c.Blocking = tier.Blocking{S: c}
	for i := range c.index {
		c.index[i] = -1
	}
	for r, wr := range members {
		c.index[wr] = r
		if wr == w.rank {
			c.rank = r
		}
	}
	c.failure = tier.Failure{Rank: c.rank, Rename: c.named, GaveUp: c.gaveUp}
	c.exec = c.newExec()
	return c
}

// Rank implements comm.Communicator.
func (c *Comm) Rank() int { return c.rank }

// Size implements comm.Communicator.
func (c *Comm) Size() int { return len(c.members) }

// Name is the communicator's name in errors and logs ("world",
// "world/split#1(color 0)", or SetName's).
func (c *Comm) Name() string { return c.name }

// SetName renames the communicator in its errors, logs and flight
// recorder's dump, and names the communicators it splits off from now on
// after it: a composer that split it off names it by its role, as its own
// errors do (hiercomm.Init names a hierarchy's rails "rail 0"). Call it
// before the communicator is used.
func (c *Comm) SetName(name string) {
	c.name = name
	if c.rec != nil {
		c.rec.Identify(name, c.jobRank())
	}
}

// jobRank is this process's rank in the whole job, as logs and the flight
// recorder's dump show it before this communicator's: its world rank, or
// -1 for the world itself, whose ranks are the job's.
func (c *Comm) jobRank() int {
	if c.owner {
		return -1
	}
	return c.w.rank
}

// who is how the communicator's log lines name it and this process: its
// name, the world rank first, then this communicator's where they may
// differ (a split: comm="rail 1" rank=3 local=0).
func (c *Comm) who() []any {
	if j := c.jobRank(); j >= 0 {
		return []any{"comm", c.name, "rank", j, "local", c.rank}
	}
	return []any{"comm", c.name, "rank", c.rank}
}

func (c *Comm) commRank(worldRank int) int {
	if worldRank < 0 || worldRank >= len(c.index) {
		return -1
	}
	return c.index[worldRank]
}

// abort makes every later call fail fast with cause, and fails the
// operations in flight: after a mismatch the ranks no longer agree on what
// the sequence numbers mean, and after a crash a survivor may be waiting on
// a live rank that already gave up. The first abort of a communicator is
// announced to its live peers (but for a mismatch, which travels as
// per-collective notices that keep its type), so that every survivor names
// the root cause even if it first hears of a cascade of clean closes.
func (c *Comm) abort(cause error) {
	c.input(func(f *tier.Failure) tier.Effects { return f.AbortFor(cause) })
}

// Abort implements comm.Control: the communicator is aborted with cause on
// this rank and, through an announcement that keeps cause's kind (also a
// mismatch's, unlike an abort nexar raises itself), on every live peer. A
// communicator composed of this one and others (hierarchy) calls it when
// another of its parts fails. On the world Comm, a cause that blames a
// rank's failure is news of that rank for the whole world (news.go): the
// rank is taken as a world rank, since a composed communicator's world
// part has the composer's ranks (as in dropBlamed).
func (c *Comm) Abort(cause error) {
	c.abortAs(tier.FromOutside(cause), true, false)
	if b, ok := comm.CulpritOf(cause); ok && c.owner && errors.Is(cause, comm.ErrPeerFailed) && !errors.Is(cause, comm.ErrMismatch) &&
		b.Rank >= 0 && b.Rank < c.w.size && b.Rank != c.w.rank {
		c.w.learned(b.Rank, &comm.PeerError{Peer: b.Rank, Addr: c.w.tr.PeerAddr(b.Rank), Err: errors.New(b.How)}, -1, -1)
		if d, ok := c.w.tr.(transport.PeerDropper); ok {
			d.DropPeer(b.Rank, cause)
		}
	}
}

// abortAs aborts c with cause (the first cause stays; tier.Failure.Abort):
// every collective in flight fails and its peers are told; announce says
// whether the first abort is announced to the live peers (or a later one,
// after a quiet first abort: a deadline's).
func (c *Comm) abortAs(cause error, announce, quiet bool) {
	c.input(func(f *tier.Failure) tier.Effects { return f.Abort(cause, announce, quiet) })
}

// Aborted implements comm.Control.
func (c *Comm) Aborted() <-chan struct{} { return c.abortedCh }

// AbortCause implements comm.Control.
func (c *Comm) AbortCause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failure.AbortCause()
}

// ownPeerError is err in this communicator's terms: the world's
// *comm.PeerError for a peer (a world rank) names the peer's rank here,
// with its world rank beside it (a Split child's ranks are not the
// world's). Anything else is returned as it is.
func (c *Comm) ownPeerError(err error) error {
	pe, ok := err.(*comm.PeerError)
	if !ok || c.owner {
		return err
	}
	r := c.commRank(pe.Peer)
	if r < 0 {
		return err
	}
	note := c.worldRankNote(r)
	if pe.Addr != "" {
		note += ", " + pe.Addr
	}
	return &comm.PeerError{Peer: r, Addr: note, Err: pe.Err}
}

// worldRankNote says which world rank comm rank r is, for a Split child
// (nothing for the world itself, whose ranks are the world's).
func (c *Comm) worldRankNote(r int) string {
	if c.owner || r < 0 || r >= len(c.members) {
		return ""
	}
	return fmt.Sprintf("world rank %d", c.members[r])
}

// PeerFailed reports that the process of world rank peer is gone, as a
// detector outside the transport saw it (the cluster layer's membership
// failure detector): every communicator of this process that includes peer
// is aborted with a *comm.PeerError naming it and cause, and operations
// waiting on it fail at once. It may be called on any communicator of the
// world; a later report of the same peer, from here or from the transport,
// changes nothing. Out-of-range ranks and this process's own rank are
// ignored.
func (c *Comm) PeerFailed(peer int, cause error) {
	w := c.w
	if peer < 0 || peer >= w.size || peer == w.rank {
		return
	}
	w.PeerFailed(peer, &comm.PeerError{Peer: peer, Addr: w.tr.PeerAddr(peer), Err: cause})
	if d, ok := w.tr.(transport.PeerDropper); ok {
		d.DropPeer(peer, cause)
	}
}

// Close implements comm.Communicator. Operations in flight fail with
// comm.ErrClosed. Closing the world Comm closes its Transport (gracefully:
// frames already sent are delivered first), unless a communicator Shrink
// made from it is still open: the last of them closes it.
func (c *Comm) Close() error {
	c.exec.Close()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	ops := make([]*op, 0, len(c.ops))
	for _, o := range c.ops {
		ops = append(ops, o)
	}
	c.mu.Unlock()
	for _, o := range ops {
		o.fail(comm.ErrClosed, false)
	}
	c.endPosted(comm.ErrClosed)
	c.notes.shut() // each is bounded (controlTimeout)
	if !c.owner {
		// After the notices queued before (a failure's reason must reach
		// the peers before the news that this rank is gone).
		c.announceClose()
	}
	c.w.unregister(c)
	c.mu.Lock()
	for k, f := range c.arrived {
		transport.PutBuf(f.payload)
		delete(c.arrived, k)
	}
	c.mu.Unlock()
	if c.owner || c.holds {
		c.dropBlamed() // first: news to the blamed rank then fails at once
		if c.w.release() {
			c.w.news.shut()
			return c.w.tr.Close()
		}
	}
	return nil
}

// dropBlamed cuts the connections to the rank that the failure which
// aborted this world communicator blames (comm.CulpritOf), before the
// transport's close protocol: that rank failed, so waiting up to the
// linger for its goodbye only delays Close (news of a death that came
// another way — a node-mate saw the process vanish, a peer told — reaches
// this rank long before the transport's own FailureTimeout would). A
// rank blamed from outside (Abort) is taken as a world rank: a composed
// communicator's world part has the composer's ranks.
func (c *Comm) dropBlamed() {
	c.mu.Lock()
	aborted := c.failure.Aborted()
	c.mu.Unlock()
	d, ok := c.w.tr.(transport.PeerDropper)
	if aborted == nil || !ok {
		return
	}
	if peer, ok := c.blamedWorldRank(aborted); ok && peer != c.w.rank {
		d.DropPeer(peer, aborted)
	}
}

// blamedWorldRank is the world rank of the rank of this communicator that
// err blames (comm.CulpritOf). A rank blamed from outside (Abort) is
// taken as one of this communicator's too: the composer that aborts its
// world part (hierarchy) numbers its ranks alike.
func (c *Comm) blamedWorldRank(err error) (int, bool) {
	b, ok := comm.CulpritOf(err)
	if !ok || b.Rank < 0 || b.Rank >= len(c.members) {
		return -1, false
	}
	return c.members[b.Rank], true
}

// Start implements comm.Communicator.
func (c *Comm) Start(ctx context.Context, call comm.Call) *comm.Work {
	if call.Kind == comm.KindSend || call.Kind == comm.KindRecv {
		return c.startP2P(ctx, call)
	}
	sig, verr := c.checks.Check(ctx, call, c.rank, c.Size())
	return c.exec.Start(ctx, call, verr, job{sig: sig})
}

// Run implements tier.Runner: the blocking form of Start, which runs the
// collective on the calling goroutine.
func (c *Comm) Run(ctx context.Context, call comm.Call) error {
	hoptrace.Mark(hoptrace.Call, c.w.rank, -1, 0, 0)
	defer hoptrace.Mark(hoptrace.Return, c.w.rank, -1, 0, 0)
	if call.Kind == comm.KindSend || call.Kind == comm.KindRecv {
		return c.doP2P(ctx, call)
	}
	sig, verr := c.checks.Check(ctx, call, c.rank, c.Size())
	return c.exec.Do(ctx, call, verr, job{sig: sig})
}

// job is a collective on the executor: its Signature, what Admit found
// for it, and for a collective that is not a comm.Call (Split) what it
// runs instead of the call's schedule.
type job struct {
	sig   comm.Signature
	split func(*op) error
	o     *op
	post  func() // what Admit's failure effects left to do outside c.mu
}

// doSplit runs split as a collective with Signature sig, on the calling
// goroutine.
func (c *Comm) doSplit(ctx context.Context, sig comm.Signature, verr error, split func(*op) error) error {
	return c.exec.Do(ctx, comm.Call{Kind: sig.Kind}, verr, job{sig: sig, split: split})
}

// newExec is the communicator's executor. Collectives run concurrently,
// each as soon as it is started (on the caller's goroutine when it
// blocks): the sequence number fixed at Start keeps the ranks in step, and
// frames carry it. A collective whose arguments failed validation still
// takes its number, and the peers are told, so they fail it too instead of
// waiting.
func (c *Comm) newExec() *tier.Exec[job] {
	if c.opt.FlightRecorder > 0 {
		c.rec = tier.NewFlightRecorder(c.opt.FlightRecorder, c.name, c.rank, c.opt.Logger)
		c.rec.Identify(c.name, c.jobRank())
	}
	return tier.NewExec(tier.ExecConfig[job]{
		Recorder:   c.rec,
		Concurrent: true,
		Recycle:    true,  // Run keeps nothing of its task (the op is its own) once it returns
		Locker:     &c.mu, // frames for a collective must find it registered once it is numbered
		Admit: func(t *tier.Task[job]) error {
			j := &t.X
			j.o = c.newOp(t.Ctx, t.Seq, j.sig)
			hoptrace.Mark(hoptrace.Admit, c.w.rank, -1, t.Seq, 0)
			c.ops[t.Seq] = j.o
			// A call refused here (a bad argument; any call once the
			// communicator is aborted) still takes its number and its
			// peers are told, so that a peer that has not heard of the
			// failure does not wait for this rank; so does what peers
			// said of this collective before (tier.Failure.Start).
			j.post = c.applyLocked(c.failure.Start(t.Seq, j.sig, t.Err))
			return nil
		},
		Run: func(t *tier.Task[job]) error {
			j := &t.X
			o := j.o
			j.post()
			select {
			case <-o.done: // failed as it started
			default:
				if t.Ctx.Err() != nil {
					// The caller's context ended before the collective
					// began: fail it before any frame goes out (the op's
					// watch of the context runs later, on a goroutine of
					// its own), so the peers wait for no data of this rank.
					o.fail(localFailure(context.Cause(t.Ctx)), true)
					break
				}
				var err error
				if j.split != nil {
					err = j.split(o)
				} else {
					err = runCollective(o, t.Call)
				}
				if err != nil {
					o.fail(localFailure(err), true)
				}
			}
			return o.finish()
		},
		Refuse: func(t *tier.Task[job], err error) error {
			return &comm.OpError{Rank: c.rank, Peer: -1, Kind: t.X.sig.Kind, Comm: c.name, Err: err}
		},
	})
}

// refuseLocked is the error of a point-to-point call on a closed or
// aborted communicator.
func (c *Comm) refuseLocked() error {
	if c.closed {
		return comm.ErrClosed
	}
	return c.failure.Aborted()
}

// deliver routes an arrived frame (src is a world rank).
func (c *Comm) deliver(wsrc int, h transport.Header, payload []byte) {
	src := c.commRank(wsrc)
	if src < 0 {
		c.opt.Logger.Warn("nexar: dropped a frame from a rank outside the communicator", append(c.who(), "src", wsrc, "kind", h.Kind)...)
		transport.PutBuf(payload)
		return
	}
	f := frame{src: src, h: h, payload: payload}
	switch h.Kind {
	case transport.FrameData:
		c.onData(f)
	case transport.FrameP2P:
		k := keyOf(src, h)
		c.mu.Lock()
		c.countLocked(src)
		if p := c.takePostedLocked(k); p != nil {
			c.mu.Unlock()
			c.fill(p, f)
			return
		}
		c.putLocked(k, f)
		c.mu.Unlock()
	case transport.FrameFail:
		c.onFail(f)
	case transport.FrameProbe:
		c.onProbe(f)
	case transport.FrameProbeReply:
		c.onProbeReply(f)
	case transport.FrameShrink:
		c.onShrink(f)
	case transport.FrameProgress:
		c.onProgress(f)
	case transport.FrameProgressReply:
		c.onProgressReply(f)
	case transport.FrameClosed:
		transport.PutBuf(payload)
		c.mu.Lock()
		if c.left != nil {
			c.left[src] = max(0, h.Sig.Count)
			c.wakeLocked()
		}
		c.mu.Unlock()
	default:
		transport.PutBuf(payload)
	}
}

func (c *Comm) onData(f frame) {
	c.mu.Lock()
	c.countLocked(f.src)
	// The failure machine checks the sender's call against this rank's
	// (tier.Failure.Frame); a frame of a collective that may still take
	// it is kept.
	keep, eff := c.failure.Frame(f.src, f.h.Seq, f.h.Sig)
	if keep {
		c.putLocked(keyOf(f.src, f.h), f)
	} else {
		transport.PutBuf(f.payload)
	}
	post := c.applyLocked(eff)
	c.mu.Unlock()
	post()
}

// countLocked counts a data or point-to-point frame from src; when src
// has closed and this was its last, the waiters re-check.
func (c *Comm) countLocked(src int) {
	if c.got == nil {
		return
	}
	c.got[src]++
	if c.goneLocked(src) {
		c.wakeLocked()
	}
}

func (c *Comm) wakeLocked() {
	close(c.leftCh)
	c.leftCh = make(chan struct{})
}

// goneLocked reports whether src closed its side and everything it sent
// has arrived: a frame not here yet will never come.
func (c *Comm) goneLocked(src int) bool {
	return c.left != nil && c.left[src] >= 0 && c.got[src] >= uint64(c.left[src])
}

// errCommClosed is why a wait for a rank that closed its side ended.
var errCommClosed = errors.New("it closed its communicator")

// deadPeerError is why a wait for peer ended when the world found it dead
// (dead, as the world's peerState gives it).
func (c *Comm) deadPeerError(peer int, dead error) error {
	return &peerFault{peer: peer, err: c.ownPeerError(dead)}
}

// closeGrace bounds how long a collective that a peer's clean close
// ended waits for news of the failure that made the peer close
// (collectivePeerError).
const closeGrace = 500 * time.Millisecond

// collectivePeerError is why a collective's wait for peer ended when the
// world found it dead. A peer that closed cleanly in the middle of a
// collective closed because its caller gave up, almost always on a
// failure it saw: its news of that failure (news.go) went out before its
// goodbye, but on another link or lane, and may arrive just after it.
// The error then waits, at most closeGrace, for a failure of a member of
// this communicator, or its abort, and names that instead of the
// blameless close; without one it is the close's. The same holds for a
// collective's send to the closed peer (op.sendCount): the send and the
// wait are two ends of one collective.
func (c *Comm) collectivePeerError(peer int, dead error) error {
	if !errors.Is(dead, transport.ErrPeerClosed) {
		return c.deadPeerError(peer, dead)
	}
	return c.closeCause(c.deadPeerError(peer, dead))
}

// closeCause is collectivePeerError's wait: the failure of a member, or
// the abort, that comes within closeGrace, else closed (the close's own
// error, in this communicator's terms).
func (c *Comm) closeCause(closed error) error {
	timer := timerpool.Get(closeGrace)
	defer timerpool.Put(timer)
	for {
		died := c.w.deaths()
		for r, wr := range c.members {
			if _, err := c.w.peerState(wr); r != c.rank && err != nil && !errors.Is(err, transport.ErrPeerClosed) {
				return c.deadPeerError(r, err)
			}
		}
		select {
		case <-died:
		case <-c.abortedCh:
			c.mu.Lock()
			err := c.failure.Aborted()
			c.mu.Unlock()
			return err
		case <-timer.C:
			return closed
		}
	}
}

// closedPeerError is why a wait for peer ended when it closed its side
// and everything it sent has arrived (goneLocked).
func (c *Comm) closedPeerError(peer int) error {
	return &comm.PeerError{Peer: peer, Addr: c.worldRankNote(peer), Err: errCommClosed}
}

// announceClose tells every live peer that this rank closed its side and
// how many frames it sent them, so a peer waiting for more gives up once
// those have arrived (a child's peers would otherwise wait for their
// deadline: the transport stays up for the parent).
func (c *Comm) announceClose() {
	var wg sync.WaitGroup
	for p, wr := range c.members {
		if p == c.rank {
			continue
		}
		if _, dead := c.w.peerState(wr); dead != nil {
			continue
		}
		wg.Go(func() {
			c.sendControl(p, transport.Header{Kind: transport.FrameClosed, Comm: c.id, Sig: comm.Signature{Count: int64(c.sent[p].Load())}}, nil)
		})
	}
	wg.Wait() // each is bounded (controlTimeout)
}

// sendFrame sends a data or point-to-point frame to peer, counted for
// announceClose.
func (c *Comm) sendFrame(ctx context.Context, peer int, h transport.Header, payload []byte) error {
	if err := c.w.send(ctx, c.members[peer], h, payload); err != nil {
		return c.ownPeerError(err)
	}
	if c.sent != nil {
		c.sent[peer].Add(1)
	}
	return nil
}

// putLocked hands f to the receive waiting for it, or keeps it until one does.
func (c *Comm) putLocked(k mkey, f frame) {
	if ch, ok := c.waiters[k]; ok {
		hoptrace.Mark(hoptrace.Matched, c.w.rank, c.members[f.src], k.seq, k.step)
		delete(c.waiters, k)
		delete(c.landings, k) // not used: the frame came the ordinary way
		ch <- f
		return
	}
	if old, dup := c.arrived[k]; dup {
		// A protocol bug on the sender: keep the first, say so.
		c.opt.Logger.Error("nexar: duplicate frame", append(c.who(), "src", f.src, "kind", f.h.Kind, "seq", f.h.Seq, "step", f.h.Step)...)
		transport.PutBuf(old.payload)
	}
	c.arrived[k] = f
}

// onFail hands a peer's failure notice to the failure machine
// (tier.Failure.Heard).
func (c *Comm) onFail(f frame) {
	n := frameNotice(f)
	transport.PutBuf(f.payload)
	c.input(func(m *tier.Failure) tier.Effects { return m.Heard(f.src, n) })
}

// onProbe answers a peer that has waited a while for this rank in
// collective Seq: a different Signature here is a mismatch on both sides;
// a collective not started yet is said so, for the peer's eventual error;
// one started here but itself waiting on ranks that had not started it
// names them (with their last started), so that a deadline several hops
// away names the straggler, not the neighbour waiting on it.
func (c *Comm) onProbe(f frame) {
	transport.PutBuf(f.payload)
	c.mu.Lock()
	answer, eff := c.failure.Probed(f.src, f.h.Seq, f.h.Sig)
	last := c.failure.Started()
	var (
		sig        comm.Signature
		stragglers []byte
	)
	if o := c.ops[f.h.Seq]; answer == tier.ProbeRunning && o != nil {
		sig, stragglers = o.sig, encodeBehind(o.behind, f.src)
	}
	post := c.applyLocked(eff)
	c.mu.Unlock()
	post()
	switch {
	case answer == tier.ProbeAhead:
		c.notifyLater(f.src, transport.Header{Kind: transport.FrameProbeReply, Comm: c.id, Seq: f.h.Seq, Step: uint32(min(last, 1<<32-1))}, nil)
	case stragglers != nil:
		c.notifyLater(f.src, transport.Header{Kind: transport.FrameProbeReply, Comm: c.id, Seq: f.h.Seq, Sig: sig}, stragglers)
	}
}

// A probe reply's payload, from a rank that has started the collective,
// names the ranks it knows had not (behindRecord bytes each: the rank, a
// rank of the communicator, then its last started collective).
const behindRecord = 12

// encodeBehind encodes behind without the rank asking (which is not
// behind, it waits too); nil if nothing is left.
func encodeBehind(behind map[int]uint64, asking int) []byte {
	var b []byte
	for _, r := range slices.Sorted(maps.Keys(behind)) {
		if r != asking {
			b = binary.LittleEndian.AppendUint32(b, uint32(r))
			b = binary.LittleEndian.AppendUint64(b, behind[r])
		}
	}
	return b
}

func (c *Comm) onProbeReply(f frame) {
	defer transport.PutBuf(f.payload)
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.ops[f.h.Seq]
	if o == nil {
		return
	}
	if o.behind == nil {
		o.behind = map[int]uint64{}
	}
	if len(f.payload) == 0 {
		o.behind[f.src] = uint64(f.h.Step) // it had not started Seq
		return
	}
	// It had, and names the ranks it waits on that had not. Bytes from
	// the network: a rank outside the communicator, this one, or a
	// ragged payload is ignored.
	for b := f.payload; len(b) >= behindRecord; b = b[behindRecord:] {
		if r := int(binary.LittleEndian.Uint32(b)); r < len(c.members) && r != c.rank {
			o.behind[r] = binary.LittleEndian.Uint64(b[4:])
		}
	}
}

// notifyLater sends a control frame from a goroutine of its own (the
// caller may be a transport's read loop, which must not block). Close
// waits for such sends, so a rank's last word reaches its peers.
func (c *Comm) notifyLater(peer int, h transport.Header, payload []byte) {
	c.note(func() { c.sendControl(peer, h, payload) })
}

// note runs f, a control frame's sending, on a goroutine Close waits for.
// Once Close waits, no note starts (a failure detector or a peer may abort
// this communicator while it closes); the peers learn of the close from
// the transport instead.
func (c *Comm) note(f func()) { c.notes.run(f) }

// lastWords runs sends of control frames on goroutines of their own (the
// caller may be a transport's read loop, which must not block), and lets
// the closer wait for them, so that a rank's last word reaches its peers.
// Once shut, no send starts, except under a hold taken before: a hold
// says that sends are about to start (news of a failure already visible
// to the calls that it fails, news.go), and shut waits for it too. Its
// zero value is ready.
type lastWords struct {
	mu     sync.Mutex // guards closed and held, and orders wg.Add before shut's wg.Wait
	closed bool
	held   int // holds not yet released: runs are still admitted
	wg     sync.WaitGroup
}

// run runs f on a goroutine of its own, unless shut was called and no
// hold is outstanding.
func (l *lastWords) run(f func()) {
	l.mu.Lock()
	if l.closed && l.held == 0 {
		l.mu.Unlock()
		return
	}
	l.wg.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.wg.Done()
		f()
	}()
}

// hold makes shut wait until release, and admits the runs started
// meanwhile; it reports false, holding nothing, once shut was called.
func (l *lastWords) hold() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.held++
	l.wg.Add(1)
	return true
}

// release ends a hold.
func (l *lastWords) release() {
	l.mu.Lock()
	l.held--
	l.mu.Unlock()
	l.wg.Done()
}

// shut lets no more sends start and waits for those running.
func (l *lastWords) shut() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.wg.Wait()
}

// sendControl sends a small frame, best effort, bounded in time (see
// controlTimeout).
func (c *Comm) sendControl(peer int, h transport.Header, payload []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	if err := c.w.send(ctx, c.members[peer], h, payload); err != nil {
		c.opt.Logger.Debug("nexar: control frame not sent", append(c.who(), "peer", peer, "kind", h.Kind, "err", err)...)
	}
}

// peerOf is the peer an error names, for the OpError's Peer: the rank a
// transport error happened with (a rank of this communicator; a
// *comm.PeerError inside it may name a world rank), else comm.PeerOf.
func peerOf(err error) int {
	var me *comm.MismatchError
	var re *comm.RemoteError
	var pf *peerFault
	if !errors.As(err, &me) && !errors.As(err, &re) && errors.As(err, &pf) {
		return pf.peer
	}
	return comm.PeerOf(err)
}

// peerFault ties an error to the comm rank it happened with, so the OpError
// can name the peer.
type peerFault struct {
	peer int
	err  error
}

func (e *peerFault) Error() string { return e.err.Error() }
func (e *peerFault) Unwrap() error { return e.err }

func (c *Comm) String() string {
	return fmt.Sprintf("nexar.Comm(%s, rank %d of %d)", c.name, c.rank, c.Size())
}
