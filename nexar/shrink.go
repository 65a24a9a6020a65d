package nexar

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// Shrink (comm.Communicator): the survivors agree on which ranks failed, then
// each makes the same new communicator of the others over the same
// transport, as Split makes a child.
//
// The agreement is flooding consensus with the transport as the failure
// detector (Cachin, Guerraoui and Rodrigues, "Introduction to Reliable and
// Secure Distributed Programming", algorithm 5.1): in round k every rank
// sends the failed set it knows to every rank it believes alive, then
// waits, for each of them, for its round-k message or its failure (the
// transport reports every death, close and silence within the failure
// timeout). It decides once a round heard from the same ranks as the round
// before (round 0 "heard" from every rank), on the union of the sets of
// that round, and tells the others its decision in place of its next
// round's message; a rank that is told a decision adopts it and tells the
// others the same way. So two survivors never decide differently: one
// that decides in round k has heard everything any rank alive in round k
// knew, and one that has not decided by then is told. Every way out of
// the protocol (a decision, or giving up at the deadline) sends the
// message of round k+1, which is what the peers wait for; a decision or
// an abandon from any rank ends every wait (a rank that some gave up
// gets no rounds from them, but their decision, and learns it was left
// out). A rank counts as failed from the start when the transport has
// reported it, when it closed this communicator, or when the failure
// that aborted this communicator blames it.

// What a shrink frame says (the first byte of its payload).
const (
	shrinkRound     byte = iota // the sender's failed set after the round before
	shrinkDecided               // the sender decided on this failed set
	shrinkAbandoned             // the sender gave up; the rest is why
)

type shrinkKey struct {
	attempt uint64 // the sender's Shrink call on this communicator (1-based)
	round   uint32
	src     int // comm rank
}

type shrinkMsg struct {
	src    int // the sender (comm rank), once received
	kind   byte
	failed []int // comm ranks (shrinkRound, shrinkDecided)
	// why the sender gave up (shrinkAbandoned)
	reason            string
	timeout, canceled bool
}

// shrinkBox holds the agreement frames that arrived until Shrink takes
// them. Its zero value is ready.
type shrinkBox struct {
	attempts atomic.Uint64 // Shrink calls on this rank

	mu   sync.Mutex // guards done, got and wake
	done uint64     // the last attempt that ended here: its late frames are dropped
	got  map[shrinkKey]shrinkMsg
	wake chan struct{} // closed and replaced when a frame arrives
}

// end drops what is left of attempt (the messages that peers sent after
// this rank had what it needed) and what comes of it later.
func (b *shrinkBox) end(attempt uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = max(b.done, attempt)
	for k := range b.got {
		if k.attempt <= b.done {
			delete(b.got, k)
		}
	}
}

// waitLocked returns the channel closed at the next arrival.
func (b *shrinkBox) waitLocked() <-chan struct{} {
	if b.wake == nil {
		b.wake = make(chan struct{})
	}
	return b.wake
}

// onShrink keeps an agreement frame for Shrink.
func (c *Comm) onShrink(f frame) {
	m, err := decodeShrink(f.payload, c.Size())
	transport.PutBuf(f.payload)
	if err != nil {
		c.opt.Logger.Error("nexar: dropped a malformed Shrink frame", append(c.who(), "src", f.src, "err", err)...)
		return
	}
	b := &c.shrink
	b.mu.Lock()
	defer b.mu.Unlock()
	if f.h.Seq <= b.done {
		return
	}
	if b.got == nil {
		b.got = map[shrinkKey]shrinkMsg{}
	}
	b.got[shrinkKey{attempt: f.h.Seq, round: f.h.Step, src: f.src}] = m
	if b.wake != nil {
		close(b.wake)
		b.wake = nil
	}
}

func encodeShrink(m shrinkMsg) []byte {
	switch m.kind {
	case shrinkAbandoned:
		var flags byte
		if m.timeout {
			flags |= 1
		}
		if m.canceled {
			flags |= 2
		}
		return append([]byte{m.kind, flags}, m.reason...)
	}
	b := make([]byte, 1, 1+4*len(m.failed))
	b[0] = m.kind
	for _, r := range m.failed {
		b = binary.LittleEndian.AppendUint32(b, uint32(r))
	}
	return b
}

// decodeShrink reads a shrink frame's payload from a communicator of size
// ranks.
func decodeShrink(p []byte, size int) (shrinkMsg, error) {
	if len(p) == 0 {
		return shrinkMsg{}, errors.New("empty payload")
	}
	m := shrinkMsg{kind: p[0]}
	switch m.kind {
	case shrinkAbandoned:
		if len(p) < 2 {
			return m, errors.New("abandon without its flags")
		}
		m.timeout, m.canceled, m.reason = p[1]&1 != 0, p[1]&2 != 0, string(p[2:])
		return m, nil
	case shrinkRound, shrinkDecided:
	default:
		return m, fmt.Errorf("unknown message %d", m.kind)
	}
	if (len(p)-1)%4 != 0 || (len(p)-1)/4 > size {
		return m, fmt.Errorf("a failed set of %d bytes in a communicator of %d", len(p)-1, size)
	}
	for i := 1; i < len(p); i += 4 {
		r := int(binary.LittleEndian.Uint32(p[i:]))
		if r >= size {
			return m, fmt.Errorf("failed rank %d in a communicator of %d", r, size)
		}
		m.failed = append(m.failed, r)
	}
	return m, nil
}

// Shrink implements comm.Communicator: the survivors agree on the failed
// ranks and get a new communicator of the others, ranked in their order
// here. It is a *Comm over the same transport, which it keeps open: Close
// this communicator whenever you like (a world Comm's transport closes
// with the last of it and the communicators shrunk from it). Without a
// deadline on ctx, Options.Timeout bounds it. With no rank failed, every
// rank gets a copy of the whole group and c is left as it was.
func (c *Comm) Shrink(ctx context.Context) (comm.Communicator, error) {
	attempt := c.shrink.attempts.Add(1)
	fail := func(peer int, err error) (comm.Communicator, error) {
		return nil, &comm.OpError{Rank: c.rank, Peer: peer, Kind: comm.KindShrink, Seq: attempt, Comm: c.name, Err: err}
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return fail(-1, comm.ErrClosed)
	}
	if err := c.expelled(); err != nil {
		// Its links are gone because the others gave it up: it would
		// agree with itself alone.
		return fail(-1, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.opt.Timeout)
	defer cancel()
	failed, err := c.agreeFailed(ctx, attempt)
	c.shrink.end(attempt)
	if err != nil {
		return fail(peerOf(err), err)
	}
	if failed[c.rank] {
		return fail(-1, fmt.Errorf("the other ranks agreed that this rank failed (they lost their connections to it: was this process stalled?); it is in no shrunk communicator: %w", comm.ErrPeerFailed))
	}
	child, err := c.shrunk(attempt, failed)
	if err != nil {
		return fail(-1, err)
	}
	return child, nil
}

// expelled says why this rank is the one that failed — it was stalled
// past the failure timeout and its peers gave it up (ErrStalled), its
// peers cut its connections or told it that they gave it up (ErrExpelled,
// failure news naming it), or the failure that aborted the communicator
// blames it — or is nil. The error matches comm.ErrPeerFailed, as the
// agreement's verdict on such a rank does.
func (c *Comm) expelled() error {
	gaveUp := func(err error) error {
		if !errors.Is(err, comm.ErrPeerFailed) {
			err = fmt.Errorf("%w: %w", comm.ErrPeerFailed, err)
		}
		return fmt.Errorf("the other ranks gave this rank up, so it is in no shrunk communicator: %w", err)
	}
	c.w.mu.Lock()
	told := c.w.expelledErr
	c.w.mu.Unlock()
	if told != nil {
		return gaveUp(told)
	}
	for p, wr := range c.members {
		if p == c.rank {
			continue
		}
		if _, err := c.w.peerState(wr); errors.Is(err, ErrStalled) || errors.Is(err, transport.ErrExpelled) {
			return gaveUp(err)
		}
	}
	cause := c.AbortCause()
	if errors.Is(cause, ErrStalled) || errors.Is(cause, transport.ErrExpelled) {
		return gaveUp(cause)
	}
	if wr, ok := c.blamedWorldRank(cause); ok && wr == c.w.rank {
		return fmt.Errorf("the failure that aborted the communicator is this rank's, so it is in no shrunk communicator: %w", cause)
	}
	return nil
}

// agreeFailed runs the agreement; failed[r] says comm rank r failed.
func (c *Comm) agreeFailed(ctx context.Context, attempt uint64) ([]bool, error) {
	P := c.Size()
	known := make([]bool, P) // the failed ranks this rank knows of
	for p := range P {
		if p != c.rank {
			known[p] = c.peerGone(p) != nil
		}
	}
	// The rank the abort blames failed (it is never a live one), even
	// when this rank only heard of it from a peer and its own transport
	// has not noticed yet.
	if wr, ok := c.blamedWorldRank(c.AbortCause()); ok && wr != c.w.rank {
		known[c.commRank(wr)] = true
	}
	if err := ctx.Err(); err != nil {
		// Not joining at all: the peers hear so in place of round 1.
		return nil, c.abandonShrink(c.livePeers(known), attempt, 1, tier.ContextError(err))
	}
	var heard []int // the peers heard from in the round before; nil: every rank
	for round := uint32(1); ; round++ {
		live := c.livePeers(known)
		c.sendShrink(live, attempt, round, shrinkMsg{kind: shrinkRound, failed: ranksOf(known)})
		union := slices.Clone(known)
		var from []int
		for i, p := range live {
			m, gone, err := c.awaitShrink(ctx, attempt, round, p)
			switch {
			case err != nil && (errors.Is(err, transport.ErrExpelled) || errors.Is(err, ErrStalled)):
				// The others gave this rank up: none waits for it, and an
				// abandon from it would fail their agreement.
				return nil, err
			case err != nil:
				// The deadline: everyone waiting on this rank learns why,
				// and the error names every peer not heard from in this
				// round, not only the one it waited on.
				if ctxErr := ctx.Err(); ctxErr != nil && (errors.Is(err, comm.ErrTimeout) || errors.Is(err, comm.ErrCanceled)) {
					err = c.notJoined(ctxErr, append([]int{p}, c.shrinkSilent(attempt, round, live[i+1:])...), round)
				}
				return nil, c.abandonShrink(c.livePeers(union), attempt, round+1, err)
			case gone != nil:
				union[p] = true
			case m.kind == shrinkAbandoned:
				c.sendShrink(c.livePeers(union), attempt, round+1, m)
				return nil, &comm.RemoteError{Peer: m.src, Reason: "it gave up Shrink: " + m.reason, Timeout: m.timeout, Canceled: m.canceled, Culprit: -1}
			case m.kind == shrinkDecided:
				decided := make([]bool, P)
				for _, r := range m.failed {
					decided[r] = true
				}
				c.sendShrink(c.connectedPeers(), attempt, round+1, m)
				return decided, nil
			default:
				from = append(from, p)
				for _, r := range m.failed {
					union[r] = true
				}
			}
		}
		if heard != nil && slices.Equal(from, heard) || heard == nil && len(from) == P-1 {
			// Also to the ranks decided failed that are still connected:
			// one that only some saw fail learns that it was given up.
			c.sendShrink(c.connectedPeers(), attempt, round+1, shrinkMsg{kind: shrinkDecided, failed: ranksOf(union)})
			return union, nil
		}
		known, heard = union, from
		if heard == nil {
			heard = []int{}
		}
	}
}

// abandonShrink tells peers, in place of the round's message, that this
// rank gave up for err, and returns err.
func (c *Comm) abandonShrink(peers []int, attempt uint64, round uint32, err error) error {
	c.sendShrink(peers, attempt, round, shrinkMsg{kind: shrinkAbandoned, reason: err.Error(),
		timeout: errors.Is(err, comm.ErrTimeout), canceled: errors.Is(err, comm.ErrCanceled)})
	return err
}

// ranksOf lists the ranks set in s.
func ranksOf(s []bool) []int {
	var rs []int
	for r, in := range s {
		if in {
			rs = append(rs, r)
		}
	}
	return rs
}

// livePeers are the ranks other than this one not in failed.
func (c *Comm) livePeers(failed []bool) []int {
	var ps []int
	for p, f := range failed {
		if p != c.rank && !f {
			ps = append(ps, p)
		}
	}
	return ps
}

// connectedPeers are the ranks other than this one that are not gone.
func (c *Comm) connectedPeers() []int {
	var ps []int
	for p := range c.Size() {
		if p != c.rank && c.peerGone(p) == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// sendShrink sends m as the round message to each of peers, at once.
func (c *Comm) sendShrink(peers []int, attempt uint64, round uint32, m shrinkMsg) {
	h := transport.Header{Kind: transport.FrameShrink, Comm: c.id, Seq: attempt, Step: round}
	payload := encodeShrink(m)
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Go(func() { c.sendControl(p, h, payload) })
	}
	wg.Wait() // each is bounded (controlTimeout)
}

// peerGone is why comm rank p is gone — its process or connection failed,
// or it closed this communicator — or nil while it is here.
func (c *Comm) peerGone(p int) error {
	if _, err := c.w.peerState(c.members[p]); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.left != nil && c.left[p] >= 0 {
		return errCommClosed
	}
	return nil
}

// awaitShrink waits for p's message of round or any rank's decision or
// abandon (m, with its sender), or for p to be gone (gone is then why),
// or for ctx to end (err).
func (c *Comm) awaitShrink(ctx context.Context, attempt uint64, round uint32, p int) (m shrinkMsg, gone, err error) {
	k := shrinkKey{attempt: attempt, round: round, src: p}
	b := &c.shrink
	take := func() (shrinkMsg, bool, <-chan struct{}) {
		b.mu.Lock()
		defer b.mu.Unlock()
		m, ok := b.got[k]
		if ok {
			delete(b.got, k)
			m.src = p
			return m, true, nil
		}
		// A decision or an abandon ends the wait, whoever sent it and
		// with whichever round's number: a rank that does not count this
		// one alive sends it no rounds, but its decision.
		for k2, m := range b.got {
			if k2.attempt == k.attempt && m.kind != shrinkRound {
				delete(b.got, k2)
				m.src = k2.src
				return m, true, nil
			}
		}
		return m, false, b.waitLocked()
	}
	for {
		// The channels first, then the checks: news that lands between
		// a check and taking its channel would close a channel this wait
		// never sees (a rank told it was given up waited for its
		// deadline, TestShrinkAgreesOnTheUnionOfWhatEachKnows in CI).
		deaths, _ := c.w.peerState(c.members[p])
		m, ok, arrived := take()
		if ok {
			return m, nil, nil
		}
		if err := c.expelled(); err != nil {
			// Told meanwhile that the others gave this rank up (failure
			// news, which also wakes deaths): they will not send to it.
			return m, nil, err
		}
		c.mu.Lock()
		leftCh := c.leftCh
		c.mu.Unlock()
		if gone := c.peerGone(p); gone != nil {
			// What p sent before it went has been delivered.
			if m, ok, _ := take(); ok {
				return m, nil, nil
			}
			return m, gone, nil
		}
		select {
		case <-arrived:
		case <-deaths:
		case <-leftCh:
		case <-c.done:
			return m, nil, comm.ErrClosed
		case <-ctx.Done():
			return m, nil, c.notJoined(ctx.Err(), []int{p}, round)
		}
	}
}

// shrinkSilent lists the peers of peers whose message of the round has
// not arrived and that are not known gone (which the agreement counts as
// failed, not as late).
func (c *Comm) shrinkSilent(attempt uint64, round uint32, peers []int) []int {
	b := &c.shrink
	var silent []int
	b.mu.Lock()
	for _, p := range peers {
		if _, ok := b.got[shrinkKey{attempt: attempt, round: round, src: p}]; !ok {
			silent = append(silent, p)
		}
	}
	b.mu.Unlock()
	return slices.DeleteFunc(silent, func(p int) bool { return c.peerGone(p) != nil })
}

// notJoined is the error of an agreement that ctxErr ended while the
// peers silent (the first is the one the error blames) had not sent
// their message of the round.
func (c *Comm) notJoined(ctxErr error, silent []int, round uint32) error {
	names := make([]string, len(silent))
	for i, p := range silent {
		names[i] = fmt.Sprintf("rank %d%s", p, c.rankNote(p))
	}
	who := names[0]
	if n := len(names); n > 1 {
		who = strings.Join(names[:n-1], ", ") + " and " + names[n-1]
	}
	return &peerFault{peer: silent[0], err: fmt.Errorf("%w: %s had not joined the agreement on the failed ranks (round %d): every surviving rank must call Shrink",
		tier.ContextError(ctxErr), who, round)}
}

// rankNote is " (world rank w)" for a Split child's rank p, else "".
func (c *Comm) rankNote(p int) string {
	if n := c.worldRankNote(p); n != "" {
		return " (" + n + ")"
	}
	return ""
}

// shrunk makes the communicator of the ranks not in failed and makes
// sure the transport has given up on the failed ones.
func (c *Comm) shrunk(attempt uint64, failed []bool) (*Comm, error) {
	var members []int
	h := fnv.New64a()
	var b [8]byte
	for _, x := range []uint64{c.id, attempt, 0x5368_7269_6e6b} { // "Shrink"
		binary.LittleEndian.PutUint64(b[:], x)
		h.Write(b[:])
	}
	for p, wr := range c.members {
		if failed[p] {
			if c.peerGone(p) == nil {
				// Another survivor saw it fail: so be it here too, so that
				// no communicator waits for it and Close does not linger.
				c.PeerFailed(wr, fmt.Errorf("the survivors of %s agreed in Shrink that it failed (another rank saw it fail)", c.name))
			}
			continue
		}
		members = append(members, wr)
		binary.LittleEndian.PutUint64(b[:], uint64(wr))
		h.Write(b[:])
	}
	name := fmt.Sprintf("%s/shrink#%d(%d of %d)", c.name, attempt, len(members), c.Size())
	child := newComm(c.w, h.Sum64(), name, members, c.opt, false)
	child.holds = true
	c.w.hold()
	if err := c.w.register(child); err != nil {
		c.w.release()
		return nil, err
	}
	return child, nil
}

// hold counts one more communicator that keeps the transport open (the
// world Comm holds it from the start, each shrunk one from Shrink).
func (w *world) hold() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.holds++
}

// release drops a hold and reports whether it was the last: the caller
// then closes the transport.
func (w *world) release() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.holds--
	return w.holds == 0
}
