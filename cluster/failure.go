package cluster

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hiercomm/hiercomm/topology"
)

// Detector holds the timings of memberlist's failure detector (SWIM with
// Lifeguard's suspicion). Every field left zero takes the default its
// comment gives; the defaults suit training jobs on a LAN or a datacenter
// fabric. Every member of a job should use the same values.
type Detector struct {
	// ProbeInterval is the time between two probes by one member: each
	// member probes one other per interval, going through the members in a
	// shuffled rotation. If zero, defaults to 1s.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a direct UDP probe waits for its ack before
	// indirect probes (through up to 3 other members) and a TCP probe are
	// tried; those wait until the ProbeInterval is over. It must be less
	// than ProbeInterval: about the 99th percentile of the round-trip time.
	// If zero, defaults to 500ms.
	ProbeTimeout time.Duration
	// SuspicionMult: a member that failed a probe is suspect for
	// SuspicionMult * max(1, log10(n)) * ProbeInterval (n the number of
	// members) before it is declared dead, if other members confirm the
	// suspicion; a suspect that is alive refutes it in that time. If zero,
	// defaults to 4.
	SuspicionMult int
	// SuspicionMaxTimeoutMult multiplies the suspicion time when no other
	// member confirms it (a detector that is itself cut off waits longer
	// before it accuses). If zero, defaults to 2.
	SuspicionMaxTimeoutMult int
	// GossipInterval is the time between two gossip rounds, each to 3
	// random members; it carries joins, suspicions and deaths. If zero,
	// defaults to 200ms.
	GossipInterval time.Duration
}

// Defaults of Detector.
const (
	DefaultProbeInterval           = time.Second
	DefaultProbeTimeout            = 500 * time.Millisecond
	DefaultSuspicionMult           = 4
	DefaultSuspicionMaxTimeoutMult = 2
	DefaultGossipInterval          = 200 * time.Millisecond
)

// awarenessMax is memberlist's AwarenessMaxMultiplier (Lifeguard's local
// health): a member whose own probes go unanswered stretches its probe wait
// up to this many probe intervals, so that a slow process does not accuse
// healthy ones. It enters Bound.
const awarenessMax = 8

// withDefaults fills the zero fields.
func (d Detector) withDefaults() Detector {
	if d.ProbeInterval == 0 {
		d.ProbeInterval = DefaultProbeInterval
	}
	if d.ProbeTimeout == 0 {
		d.ProbeTimeout = DefaultProbeTimeout
	}
	if d.SuspicionMult == 0 {
		d.SuspicionMult = DefaultSuspicionMult
	}
	if d.SuspicionMaxTimeoutMult == 0 {
		d.SuspicionMaxTimeoutMult = DefaultSuspicionMaxTimeoutMult
	}
	if d.GossipInterval == 0 {
		d.GossipInterval = DefaultGossipInterval
	}
	return d
}

// validate returns d with defaults filled in, or an error naming the field.
func (d Detector) validate() (Detector, error) {
	if d.ProbeInterval < 0 || d.ProbeTimeout < 0 || d.SuspicionMult < 0 || d.SuspicionMaxTimeoutMult < 0 || d.GossipInterval < 0 {
		return d, fmt.Errorf("Detector fields must not be negative: %+v", d)
	}
	d = d.withDefaults()
	if d.ProbeTimeout >= d.ProbeInterval {
		return d, fmt.Errorf("Detector.ProbeTimeout %v must be less than Detector.ProbeInterval %v", d.ProbeTimeout, d.ProbeInterval)
	}
	if d.ProbeInterval < time.Millisecond || d.GossipInterval < time.Millisecond {
		return d, fmt.Errorf("Detector.ProbeInterval %v and Detector.GossipInterval %v must be at least 1ms", d.ProbeInterval, d.GossipInterval)
	}
	return d, nil
}

// suspicion is the base suspicion time for n members, as memberlist
// computes it (rounded up, where memberlist truncates).
func (d Detector) suspicion(n int) time.Duration {
	scale := math.Max(1, math.Log10(float64(max(n, 1))))
	return time.Duration(math.Ceil(float64(d.SuspicionMult) * scale * float64(d.ProbeInterval)))
}

// Bound is the longest time, after a member of a world of n members dies,
// until every survivor has declared it dead (and raised its Failure), for a
// detector with these timings (zero fields count as their defaults):
//
//	Bound(n) = (2n - 3 + 8) * ProbeInterval
//	         + SuspicionMaxTimeoutMult * SuspicionMult * max(1, log10(n)) * ProbeInterval
//	         + 6 * GossipInterval
//
// Every survivor probes the dead member itself: within its rotation it
// reaches it at most 2(n-1)-1 probe intervals after its previous probe (the
// rotation is reshuffled each time it wraps, so the member can be first in
// one round and last in the next); that probe fails at most 8 probe
// intervals later (the probe waits one interval, stretched up to 8-fold by
// Lifeguard's local health when this survivor's own probes go unanswered);
// the suspicion it then raises ends, without any confirmation, after the
// maximum suspicion time; the survivor then waits 5 gossip intervals for a
// leave notice that would make the departure graceful (see NotifyLeave).
// Gossip from other survivors only brings the verdict sooner; one more
// GossipInterval is added for scheduling. The bound assumes a survivor that
// is itself healthy (its probes of the living are answered); n is the
// number of gossip members, which is the world size once the world has
// formed.
//
// The bound is the worst case of the rotation, which grows with n. The
// typical time is much shorter: some survivor probes the dead member within
// about one ProbeInterval, its suspicion reaches the others by gossip, and
// their confirmations cut the suspicion to SuspicionMult * max(1, log10(n))
// * ProbeInterval: with the defaults, about 7 s for a world of 16.
func (d Detector) Bound(n int) time.Duration {
	if n < 2 {
		return 0
	}
	d = d.withDefaults()
	rotation := time.Duration(2*n-3) * d.ProbeInterval
	probe := awarenessMax * d.ProbeInterval
	suspect := time.Duration(d.SuspicionMaxTimeoutMult) * d.suspicion(n)
	return rotation + probe + suspect + leaveWindow(d) + d.GossipInterval
}

// Failure is the death of a member of the formed world, as the failure
// detector declared it. It is an error: the root package aborts every
// communicator that contains the member with it.
type Failure struct {
	// Rank is the dead member's global rank.
	Rank int
	// Member is the dead member as it announced itself, rank assigned.
	Member topology.Member
	// At is when memberlist declared the member gone here (the Failure
	// is raised a few gossip intervals later, when no leave notice came).
	At time.Time
}

func (f *Failure) Error() string {
	parts := []string{"host " + f.Member.Host}
	if f.Member.Name != "" {
		parts = append(parts, "name "+f.Member.Name)
	}
	if f.Member.Addr != "" {
		parts = append(parts, f.Member.Addr)
	}
	return fmt.Sprintf("rank %d (%s) was declared dead by the failure detector; check its log", f.Rank, strings.Join(parts, ", "))
}

// Unwrap returns ErrMemberFailed.
func (f *Failure) Unwrap() error { return ErrMemberFailed }

// dispatcher runs the OnFailure callbacks on a goroutine of its own, in the
// order they were queued, so that memberlist's goroutines (which report
// deaths while holding memberlist's locks) never wait for a callback.
type dispatcher struct {
	mu      sync.Mutex
	queue   []func() // guarded by mu
	stopped bool     // guarded by mu: no more calls run or queue

	wake chan struct{} // capacity 1: the queue has work, or stop
	done chan struct{} // closed when the goroutine has returned
}

func newDispatcher() *dispatcher {
	d := &dispatcher{wake: make(chan struct{}, 1), done: make(chan struct{})}
	go d.run()
	return d
}

// post queues call. It never blocks.
func (d *dispatcher) post(call func()) {
	d.mu.Lock()
	if !d.stopped {
		d.queue = append(d.queue, call)
	}
	d.mu.Unlock()
	d.signal()
}

func (d *dispatcher) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *dispatcher) run() {
	defer close(d.done)
	for range d.wake {
		for {
			d.mu.Lock()
			if d.stopped {
				d.mu.Unlock()
				return
			}
			if len(d.queue) == 0 {
				d.mu.Unlock()
				break
			}
			call := d.queue[0]
			d.queue[0] = nil
			d.queue = d.queue[1:]
			d.mu.Unlock()
			call()
		}
	}
}

// stop drops the calls not yet started and ends the goroutine once the
// call in progress, if any, returns. It does not wait for that; done is
// closed then.
func (d *dispatcher) stop() {
	d.mu.Lock()
	d.stopped = true
	d.queue = nil
	d.mu.Unlock()
	d.signal()
}

// Failure events: the view's side.
//
// memberlist reports a member that left and one that died alike, through
// NotifyLeave (v0.7.0 never sets Node.State there: hashicorp/memberlist
// issue 293). So a process that leaves gracefully also gossips a leave
// notice of its own, queued just before memberlist's leave message (they
// travel in the same packets), and waits until the notice has gone out
// (Cluster.Leave); every member that receives the notice gossips it on. A
// member that disappears without a notice waits leaveWindow for one
// (gossip may bring it late, or just after memberlist's message) and is
// then declared failed.

// noticeRetransmitMult is the retransmit multiplier of leave notices, as
// memberlist's for its own messages: each member passes a notice on
// noticeRetransmitMult * ceil(log10(n+1)) times.
const noticeRetransmitMult = 4

// leaveWindow is how long a member gone without a leave notice may wait for
// one: a few gossip rounds.
func leaveWindow(d Detector) time.Duration { return 5 * d.GossipInterval }

// noticeBroadcast is a leave notice in the gossip queue.
type noticeBroadcast struct {
	name string
	msg  []byte
	once sync.Once
	done chan struct{} // closed when the queue is done with it; may be nil
}

var _ memberlist.NamedBroadcast = (*noticeBroadcast)(nil)

func newNoticeBroadcast(name string, done chan struct{}) *noticeBroadcast {
	msg, _ := json.Marshal(message{V: metaVersion, Leave: name}) // cannot fail
	return &noticeBroadcast{name: name, msg: msg, done: done}
}

func (b *noticeBroadcast) Name() string    { return "leave " + b.name }
func (b *noticeBroadcast) Message() []byte { return b.msg }
func (b *noticeBroadcast) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(memberlist.NamedBroadcast)
	return ok && o.Name() == b.Name()
}
func (b *noticeBroadcast) Finished() {
	if b.done != nil {
		b.once.Do(func() { close(b.done) })
	}
}

// GetBroadcasts hands memberlist the leave notices to piggyback on gossip.
func (v *view) GetBroadcasts(overhead, limit int) [][]byte {
	return v.notices.GetBroadcasts(overhead, limit)
}

// announceLeave queues this process's leave notice; the channel is closed
// when it has been passed on as often as gossip requires.
func (v *view) announceLeave() <-chan struct{} {
	done := make(chan struct{})
	v.notices.QueueBroadcast(newNoticeBroadcast(v.self, done))
	return done
}

// nobodyListening reports whether every other world member has already
// left or failed, so that this process's own leave notice has no one to
// reach and waiting for it to go out would only wait out the timeout.
func (v *view) nobodyListening() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.formed {
		return false
	}
	for name := range v.world {
		if name != v.self && !v.leaving[name] && !v.failed[name] {
			return false
		}
	}
	return true
}

// NotifyMsg receives a leave notice: it is recorded, passed on, and
// settles a member that is already gone; or an admission or a
// withdrawal (grow.go).
func (v *view) NotifyMsg(b []byte) {
	var n message
	if err := json.Unmarshal(b, &n); err != nil || n.V != metaVersion || n.Leave == "" && n.Admit == nil && n.Withdraw == nil {
		v.log.Debug("cluster: ignoring a gossip message that is not a leave notice, an admission or a withdrawal", "len", len(b))
		return
	}
	switch {
	case n.Admit != nil:
		v.admittedBy(n.Admit)
		return
	case n.Withdraw != nil:
		v.withdrawnBy(n.Withdraw)
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if n.Leave == v.self || v.leaving[n.Leave] {
		return
	}
	v.leaving[n.Leave] = true
	v.notices.QueueBroadcast(newNoticeBroadcast(n.Leave, nil))
	if s, ok := v.seen[n.Leave]; ok && !v.formed && s.state == stateDead {
		s.state = stateLeft
		v.signal()
	}
	if t, ok := v.pending[n.Leave]; ok {
		t.Stop()
		delete(v.pending, n.Leave)
		v.leftLocked(n.Leave)
	}
}

// NotifyLeave records a member that memberlist no longer counts: it left,
// or it was declared dead. After the world has formed, one gone without a
// leave notice becomes a Failure once leaveWindow has passed without one.
func (v *view) NotifyLeave(n *memberlist.Node) {
	if n.Name == v.self {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.goneLocked(n.Name) {
		return
	}
	if !v.formed {
		if s, ok := v.seen[n.Name]; ok {
			s.state, s.since = stateDead, time.Now()
			if v.leaving[n.Name] {
				s.state = stateLeft
			}
			v.signal()
		}
		return
	}
	if _, ok := v.world[n.Name]; !ok || v.closing || v.failed[n.Name] || v.pending[n.Name] != nil {
		return
	}
	if v.leaving[n.Name] {
		v.leftLocked(n.Name)
		return
	}
	at := time.Now()
	v.pending[n.Name] = time.AfterFunc(v.leaveWindow, func() { v.declareDead(n.Name, at) })
}

// leftLocked logs the graceful departure of a world member.
func (v *view) leftLocked(name string) {
	m := v.world[name]
	v.log.Info("cluster: a member left the world gracefully: "+describeMember(m), "job", v.jobID, "rank", m.Rank)
}

// declareDead turns a world member gone at time at, whose leave notice
// did not come, into a Failure, and queues it to every callback.
func (v *view) declareDead(name string, at time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.pending[name]; !ok || v.closing {
		return // settled meanwhile
	}
	delete(v.pending, name)
	v.failLocked(name, at)
}

// failLocked records the failure of world member name, gone at time at,
// and queues it to every callback.
func (v *view) failLocked(name string, at time.Time) {
	m := v.world[name]
	f := &Failure{Rank: m.Rank, Member: m, At: at}
	v.failed[name] = true
	v.failures = append(v.failures, f)
	v.log.Error("cluster: "+f.Error(), "job", v.jobID, "rank", m.Rank, "name", m.Name)
	for _, fn := range v.callbacks {
		v.disp.post(func() { fn(f) })
	}
}

// close stops recording: this process is leaving.
func (v *view) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.closing = true
	for name, t := range v.pending {
		t.Stop()
		delete(v.pending, name)
	}
}

func (v *view) onFailure(fn func(*Failure)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.callbacks = append(v.callbacks, fn)
	for _, f := range v.failures {
		v.disp.post(func() { fn(f) })
	}
}

func (v *view) failureList() []*Failure {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.failures)
}
