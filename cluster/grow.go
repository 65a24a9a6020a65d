package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hiercomm/hiercomm/topology"
)

// Growing a running job.
//
// A process launched with Config.Joining (HIERCOMM_JOIN=running) joins
// the gossip of a job whose world has formed, with the job's id and key
// like any member (gossip is encrypted under a key derived from both: a
// process without them cannot join, nor be seen). Its metadata says that
// it joins: the members record it as waiting (Cluster.Waiting) instead
// of counting it in a forming world or ignoring it. When the members grow
// (hiercomm's World.Grow), each of them calls Admit with the grown
// world's topology: every newcomer in it receives the admission, a
// message sent over memberlist's reliable (TCP, encrypted) stream, and
// Join returns in the newcomer with that topology and its rank in it.
// From then on the newcomers are world members like the others: their
// failures are reported (OnFailure) with the grown world's ranks, on
// every member.

// ErrNotAdmitted is wrapped by the error of a Join with Config.Joining
// that ended (JoinTimeout, or the caller's context) before the members
// of the running job admitted this process.
var ErrNotAdmitted = errors.New("cluster: not admitted into the running job")

// admission is what the members send a process they admit: the grown
// world's generation (how many times the job grew) and topology.
type admission struct {
	Gen  int                `json:"gen"`
	Topo *topology.Topology `json:"topology"`
}

// message is a gossip user message: a leave notice (failure.go) or an
// admission.
type message struct {
	V        int         `json:"v"`
	Leave    string      `json:"leave,omitempty"`
	Admit    *admission  `json:"admit,omitempty"`
	Withdraw *withdrawal `json:"withdraw,omitempty"`
}

// withdrawal is what a process of a grown world that gave the Grow up
// sends every other one (Withdraw): the generation, and why.
type withdrawal struct {
	Gen    int    `json:"gen"`
	Reason string `json:"reason"`
}

// newcomerLocked records m, which asks to join the running job, as
// waiting, unless it was launched with other settings than this process
// (it is then never admitted, and the reason is logged once).
func (v *view) newcomerLocked(m topology.Member, agree []string) {
	if m.Name == v.self {
		return
	}
	s := &seenMember{member: m, agree: agree}
	if !slices.Equal(agree, values(v.agree)) {
		if _, warned := v.foreign[m.Name]; !warned {
			why := disagreement(s, v.agree)
			v.foreign[m.Name] = why
			v.log.Warn("cluster: a process asks to join the running job, and will not be admitted: "+why, "job", v.jobID)
		}
		return
	}
	if _, ok := v.waiting[m.Name]; !ok {
		v.log.Info("cluster: a process waits to join the running job: "+describeMember(m), "job", v.jobID)
	}
	v.waiting[m.Name] = s
	v.signal()
}

// goneLocked forgets a waiting process that left or died; it reports
// whether name was one.
func (v *view) goneLocked(name string) bool {
	if _, ok := v.waiting[name]; !ok {
		return false
	}
	delete(v.waiting, name)
	v.gone[name] = true
	v.log.Info("cluster: a process that waited to join the running job is gone", "job", v.jobID, "name", name)
	return true
}

// admitted records the admission a member sent this joining process,
// the first that names it.
func (v *view) admittedBy(a *admission) {
	if a.Topo == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.joining || v.admitted != nil {
		return
	}
	for _, m := range a.Topo.Members() {
		if m.Name == v.self {
			v.admitted = a
			v.signal()
			return
		}
	}
}

// adopt makes topo the world: failures are reported with its ranks, and
// its members are no longer waiting. A newcomer of topo known to be gone
// already (it waited, and left or died) is reported failed at once: its
// death came before it was a world member, and would otherwise never be.
// One this process has not heard of yet is taken as alive.
func (v *view) adopt(topo *topology.Topology) {
	v.mu.Lock()
	defer v.mu.Unlock()
	old := v.world
	v.formed = true
	v.world = make(map[string]topology.Member, topo.Size())
	for _, m := range topo.Members() {
		v.world[m.Name] = m
		delete(v.waiting, m.Name)
	}
	if v.closing {
		return
	}
	for _, m := range topo.Members() {
		if _, member := old[m.Name]; !member && v.gone[m.Name] && !v.failed[m.Name] {
			v.log.Warn("cluster: a process admitted into the running job is gone already: "+describeMember(m), "job", v.jobID)
			v.failLocked(m.Name, time.Now())
		}
	}
}

// Waiting lists the processes that ask to join this running job (they
// were launched with Config.Joining and the same Config.Agree settings)
// and are alive, ordered by host, local index and name (the same on
// every member that sees them all), with their data-plane addresses.
// Admit takes them in.
func (c *Cluster) Waiting() []topology.Member {
	c.view.mu.Lock()
	defer c.view.mu.Unlock()
	ms := make([]topology.Member, 0, len(c.view.waiting))
	for _, s := range c.view.waiting {
		ms = append(ms, s.member)
	}
	slices.SortFunc(ms, func(a, b topology.Member) int {
		a.Rank, b.Rank = 0, 0
		return compareClaims(a, b)
	})
	return ms
}

// ErrNewcomerGone is wrapped by Admit's error when a newcomer it admits
// left or died before it could be told.
var ErrNewcomerGone = errors.New("cluster: a process admitted into the running job is gone")

// Admit makes topo, the grown world (this process's world and the
// newcomers it admits, each named as Waiting gave it on some member),
// the world of this Cluster: it sends each newcomer of topo its
// admission, at generation gen, and from then on reports failures with
// topo's ranks. Every member of the running world calls it with the same
// topo and gen, so that a newcomer is admitted as long as one member
// reaches it. A newcomer this process has not heard of yet (gossip
// spreads in rounds) is waited for, at most as long as gossip takes to
// tell every member of a join. The error wraps ErrNewcomerGone for a
// newcomer that left or died meanwhile (it is reported failed, as a
// world member, at once), and names those this process could not send
// the admission to otherwise; the Cluster has adopted topo all the same.
func (c *Cluster) Admit(topo *topology.Topology, gen int) error {
	msg, err := json.Marshal(message{V: metaVersion, Admit: &admission{Gen: gen, Topo: topo}})
	if err != nil {
		return fmt.Errorf("cluster: admission: %w", err)
	}
	c.view.mu.Lock()
	old := c.view.world
	c.view.mu.Unlock()
	rank := -1
	var newcomers []topology.Member
	for _, m := range topo.Members() {
		if m.Name == c.name {
			rank = m.Rank
		}
		if _, ok := old[m.Name]; !ok {
			newcomers = append(newcomers, m)
		}
	}
	nodes := c.awaitNewcomers(newcomers)
	var gone, unsent []error
	for _, m := range newcomers {
		c.view.mu.Lock()
		left := c.view.gone[m.Name]
		c.view.mu.Unlock()
		n := nodes[m.Name]
		switch {
		case left:
			gone = append(gone, fmt.Errorf("%s left or died", describeMember(m)))
		case n == nil:
			// Not heard of here yet (gossip is slow under load): the
			// members that saw it tell it.
			unsent = append(unsent, fmt.Errorf("%s: not heard of here yet", describeMember(m)))
		default:
			if err := c.ml.SendReliable(n, msg); err != nil {
				unsent = append(unsent, fmt.Errorf("%s: %w", describeMember(m), err))
			}
		}
	}
	c.view.adopt(topo)
	c.mu.Lock()
	c.topo, c.rank = topo, rank
	c.mu.Unlock()
	switch {
	case len(gone) > 0:
		return fmt.Errorf("%w: admitting generation %d: %w", ErrNewcomerGone, gen, errors.Join(append(gone, unsent...)...))
	case len(unsent) > 0:
		return fmt.Errorf("cluster: sending the admission to generation %d: %w", gen, errors.Join(unsent...))
	}
	return nil
}

// awaitNewcomers returns the gossip's live nodes among newcomers, by
// name, once each is live or known gone, or once gossip has had the time
// to tell this process of each.
func (c *Cluster) awaitNewcomers(newcomers []topology.Member) map[string]*memberlist.Node {
	deadline := time.Now().Add(c.grace())
	for {
		nodes := make(map[string]*memberlist.Node)
		for _, n := range c.ml.Members() {
			nodes[n.Name] = n
		}
		c.view.mu.Lock()
		settled := true
		for _, m := range newcomers {
			settled = settled && (nodes[m.Name] != nil || c.view.gone[m.Name])
		}
		c.view.mu.Unlock()
		if settled || !time.Now().Before(deadline) {
			return nodes
		}
		time.Sleep(c.cfg.Detector.GossipInterval)
	}
}

// Withdraw tells every other process of topo, the grown world of
// generation gen, that this one gave the Grow up (reason), so that
// theirs ends at once instead of waiting for connections that will not
// come (Withdrawn). Best effort: it sends on goroutines of its own and
// does not wait.
func (c *Cluster) Withdraw(topo *topology.Topology, gen int, reason string) {
	msg, err := json.Marshal(message{V: metaVersion, Withdraw: &withdrawal{Gen: gen, Reason: reason}})
	if err != nil {
		return
	}
	nodes := make(map[string]*memberlist.Node)
	for _, n := range c.ml.Members() {
		nodes[n.Name] = n
	}
	for _, m := range topo.Members() {
		if n := nodes[m.Name]; n != nil && m.Name != c.name {
			go c.ml.SendReliable(n, msg) //nolint:errcheck // best effort: the others' own bounds hold without it
		}
	}
}

// Withdrawn returns a channel that is closed once another process of the
// grown world of generation gen gave that Grow up (Withdraw), and a
// function that says why.
func (c *Cluster) Withdrawn(gen int) (<-chan struct{}, func() string) {
	w := c.view.withdrawal(gen)
	return w.ch, func() string {
		c.view.mu.Lock()
		defer c.view.mu.Unlock()
		return w.reason
	}
}

// withdrawnState is a generation's withdrawal: ch is closed when one came.
type withdrawnState struct {
	ch     chan struct{}
	reason string // guarded by the view's mu
}

// withdrawal is generation gen's withdrawal state, made on first use.
func (v *view) withdrawal(gen int) *withdrawnState {
	v.mu.Lock()
	defer v.mu.Unlock()
	w := v.withdrawn[gen]
	if w == nil {
		w = &withdrawnState{ch: make(chan struct{})}
		v.withdrawn[gen] = w
	}
	return w
}

// withdrawnBy records a withdrawal a process sent.
func (v *view) withdrawnBy(w *withdrawal) {
	st := v.withdrawal(w.Gen)
	v.mu.Lock()
	defer v.mu.Unlock()
	if st.reason == "" {
		st.reason = w.Reason
		close(st.ch)
	}
}

// Generation is how many times the job had grown when this process
// joined it: 0 for a process of the world that formed first, the
// admission's for a process admitted into a running job.
func (c *Cluster) Generation() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// await is Join's loop for a process that joins a running job: it joins
// the gossip through the seeds, then waits until a member admits it.
func (c *Cluster) await(ctx context.Context) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.JoinTimeout)
	defer cancel()
	seeds := c.seedStatuses()
	var (
		joined       bool
		nextJoin     = start
		backoff      = 50 * time.Millisecond
		lastProgress = start
		timer        = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	for {
		c.view.mu.Lock()
		a := c.view.admitted
		c.view.mu.Unlock()
		if a != nil {
			c.view.adopt(a.Topo)
			c.mu.Lock()
			c.topo, c.gen = a.Topo, a.Gen
			for _, m := range a.Topo.Members() {
				if m.Name == c.name {
					c.rank = m.Rank
				}
			}
			c.mu.Unlock()
			c.formed(a.Topo, start)
			return nil
		}
		now := time.Now()
		if joined && c.view.aliveCount() <= 1 {
			// Every member this process saw is gone (left, or dead):
			// nobody is left to admit it.
			return fmt.Errorf("cluster: job %q: %w: every member of the running job that this process saw has left or died (after %v)",
				c.cfg.JobID, ErrNotAdmitted, time.Since(start).Round(time.Millisecond))
		}
		if !joined && !now.Before(nextJoin) {
			ok, err := c.contactSeeds(ctx, seeds)
			if err != nil {
				return c.joinError(err, start, seeds)
			}
			joined = ok
			nextJoin, backoff = time.Now().Add(backoff), min(2*backoff, maxSeedBackoff)
			continue
		}
		if now.Sub(lastProgress) >= progressEvery {
			c.log.Info("cluster: waiting to be admitted into the running job (its members admit newcomers when they grow)",
				"job", c.cfg.JobID, "gossip_joined", joined, "waited", now.Sub(start).Round(time.Millisecond))
			lastProgress = now
		}
		next := lastProgress.Add(progressEvery)
		if !joined {
			next = minTime(next, nextJoin)
		}
		timer.Reset(max(time.Until(next), time.Millisecond))
		select {
		case <-c.view.changed:
		case <-timer.C:
		case <-ctx.Done():
			how := "no seed answered: check the seeds and that the job still runs"
			if joined {
				how = "this process joined the job's gossip, but no member called Grow meanwhile"
			}
			return fmt.Errorf("cluster: job %q: %w within %v: %s: %w", c.cfg.JobID, ErrNotAdmitted,
				time.Since(start).Round(time.Millisecond), how, context.Cause(ctx))
		}
	}
}
