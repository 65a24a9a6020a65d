package shm

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// Eager broadcasts. A Broadcast of at most the segment's eagerBytes
// (Config.EagerBytes, the creator's) takes no step: its root copies the
// message into a slot of its own and returns; each other rank waits for
// that slot alone, copies the message out and says it is done. A Scatter
// whose blocks take at most eagerBytes together goes the same way: the
// root stages every block, each reader copies its own. Back-to-back
// broadcasts pipeline: every rank has eagerSmallSlots slots for
// messages of at most eagerSmall bytes and eagerSlots for larger ones,
// collective #s in slot s % eagerSmallSlots (or s % eagerSlots) of its
// root's, so a root runs up to 128 tiny broadcasts, or 16 others,
// broadcasts ahead of its slowest reader before it waits.
//
// A Gather or a Reduce whose ranks each stage at most eagerBytes goes the
// other way (eagerToRoot): every rank but the root copies its part into a
// slot of its own and returns; the root (which stages its own part too
// for a Reduce, whose recv may be its send) waits for every peer's slot,
// gathers the blocks or reduces the parts in rank order, and says it is
// done. Its ranks run ahead of it by the same rings of slots.
//
// Every rank's eager area starts with its eager line, which only it
// writes: a meta (fillMeta's fields) of the eager collective it is in,
// published by its sequence number (0 while it is being written), and
// eDone, the last eager collective it is done with (a reader copied it
// out, a root gathered or reduced it, a rank staged what no one waits
// for it to read, or the rank refused it). A slot is a meta with
// the message, or a refusal's reason, at mReason, published by the
// store of its sequence number; its rank writes it again only once every
// peer's eDone has reached the collective it holds.
//
// The ranks agree on each eager collective as follows (a reader is a
// Broadcast's or a Scatter's non-root, or a Gather's or a Reduce's root,
// which reads every peer's slot as its own root's):
//   - A reader compares the root's slot with its own call: a different
//     Signature is a *comm.MismatchError, a refusal a *comm.RemoteError.
//   - A reader that waits and finds the root elsewhere (its eager line or
//     its header at this collective with another call, or past it)
//     reports the mismatch (eagerProbe); so does a rank waiting in a
//     header for a peer whose eager line is at or past its collective
//     (eagerPast).
//   - What no reader can see (a rank that takes itself for the root when
//     every other rank names another) is caught at the next header: every
//     header carries how many eager collectives the rank took part in
//     since the last one, and a digest of their Signatures (eagerSeen,
//     eagerSum), and every rank compares them (checkEager). A rank that
//     refused an eager collective (a bad argument or an ended context: its
//     call may say anything) marks its count wild, and that header
//     compares nothing.
//
// A rank that writes a slot returns as soon as it is written: a local
// completion, as MPI's Bcast, Gather and Reduce may. A reader's later
// failure there (a mismatch, a timeout, a death) aborts the
// communicator, and the writer learns it at its next wait, or at its
// next eager collective, which first looks at every peer's state: that
// call fails with the peer's error (a mismatch keeps its kind).

// A rank's eager slots: eagerSmallSlots of eagerSmallSlot bytes (a meta
// and eagerSmall bytes of message), then eagerSlots of eagerBytes. Tiny
// messages get a deep ring in little memory (32 KiB): the deeper a root
// may run ahead, the fewer times a process switch happens per call on a
// host with more ranks than cores (4 processes on 2 cores, 8 B–2 KiB:
// 0.05 switches per call with 128 slots against 0.21 with 16, and
// 1.7–2.8 µs a call against 2.4–3.5, 3 alternating rounds).
const (
	eagerSlots      = 16
	eagerSmallSlots = 128
	eagerSmallSlot  = 2 * lineBytes
	eagerSmall      = eagerSmallSlot - mReason
)

// eagerWild, in eagerSeen: this rank refused an eager collective since
// its last header, so the digests are not compared.
const eagerWild = 1 << 31

// eDone is the offset in a rank's eager line of the last eager
// collective it is done with (u64); the meta's fields come before it.
const eDone = mReason

// eager reports whether sig is a call that goes eager, on a communicator
// of two ranks or more: a Broadcast or a Scatter whose root stages at
// most eagerBytes (the message; every rank's block), a Gather or a
// Reduce whose ranks each stage at most that (its block; the message).
// It looks at the Signature alone, so every rank that agrees on the call
// chooses alike, a rank that refuses its call (eagerRefuse) included.
func (c *Comm) eager(sig comm.Signature) bool {
	l := &c.seg.l
	switch {
	case l.eagerBytes == 0 || c.size < 2 || !sig.DType.Valid() || sig.Count < 0:
		return false
	}
	switch sig.Kind {
	case comm.KindBroadcast, comm.KindScatter, comm.KindGather, comm.KindReduce:
	default:
		return false
	}
	return sig.Count <= int64(l.eagerBytes/sig.DType.Size()/c.blocks(sig))
}

// blocks is how many blocks of Count elements a rank stages in sig, an
// eager call: one (a Broadcast's root, every rank of a Gather or a
// Reduce), or a Scatter's root one per rank.
func (c *Comm) blocks(sig comm.Signature) int {
	if sig.Kind == comm.KindScatter {
		return c.size
	}
	return 1
}

// eagerStaged is the bytes a rank stages in sig, an eager call.
func (c *Comm) eagerStaged(sig comm.Signature) int {
	return int(sig.Count) * sig.DType.Size() * c.blocks(sig)
}

// eagerLine is rank q's eager line.
func (c *Comm) eagerLine(q int) []byte {
	off := c.seg.l.eagerLine(q)
	return c.seg.mem[off : off+lineBytes : off+lineBytes]
}

// eagerSlot is rank q's slot for the collective of s: a small one when
// its message (eagerStaged) fits.
func (s *stepper) eagerSlot(q int) []byte {
	l := &s.c.seg.l
	n := l.eagerSlot
	small := s.c.eagerStaged(s.o.sig) <= eagerSmall
	if small {
		n = eagerSmallSlot
	}
	off := l.eagerAt(q, s.o.seq, small)
	return s.c.seg.mem[off : off+n : off+n]
}

// enterEager publishes in this rank's eager line that it is in the eager
// collective of s, with status: statusGo, or a refusal's code (its call
// may say anything, so no peer compares it with its own).
func (s *stepper) enterEager(status uint32) {
	line := s.c.eagerLine(s.c.rank)
	seq := u64At(line, mSeq)
	atomic.StoreUint64(seq, 0)
	s.fillMeta(line[:mReason], status, "")
	atomic.StoreUint64(seq, s.o.seq)
}

// leaveEager records this rank's part in the eager collective of s (its
// digest, wild if it refused) and publishes that it is done with it,
// waking a root that waits for its slot.
func (s *stepper) leaveEager(refused bool) {
	x := &s.c.x
	if x.eagerSeen&^eagerWild == 0 {
		x.eagerFirst = s.o.seq
	}
	x.eagerSeen++
	if refused {
		x.eagerSeen |= eagerWild
	}
	x.eagerSum = eagerMix(x.eagerSum, s.o.seq, s.o.sig)
	x.eagerLast, x.eagerSig = s.o.seq, s.o.sig
	atomic.StoreUint64(u64At(s.c.eagerLine(s.c.rank), eDone), s.o.seq)
	chime(s.c.mine.bell, s.c.mine.sleepers)
}

// eagerMix adds collective #seq, sig to the digest sum.
func eagerMix(sum, seq uint64, sig comm.Signature) uint64 {
	const prime = 0x100000001b3
	for _, v := range [...]uint64{seq, uint64(sig.Kind) | uint64(sig.DType)<<8 | uint64(sig.Op)<<16 | uint64(uint32(sig.Root))<<32,
		uint64(sig.Count), uint64(sig.Outer.Kind) | uint64(sig.Outer.DType)<<8 | uint64(sig.Outer.Op)<<16 | uint64(sig.Outer.Hash)<<32} {
		sum = (sum ^ v) * prime
		sum ^= sum >> 29
	}
	return sum
}

// eagerHeader starts the count and digest of eager collectives afresh
// after the header of collective #seq.
func (x *execState) eagerHeader(seq uint64) {
	x.eagerSeen, x.eagerSum, x.header = 0, 0, seq
}

// eagerRooted is an eager Broadcast or Scatter from root: the root stages
// msg (its buffer; every rank's block), and every rank's result, recv, is
// msg[at:at+len(recv)] (the whole message; its own block).
func eagerRooted(s *stepper, msg, recv []byte, at, root int) error {
	c := s.c
	s.enterEager(statusGo)
	if c.rank == root {
		if err := s.eagerPut(&s.b, statusGo, msg, ""); err != nil {
			s.broken = true
			return err
		}
		if own := msg[at : at+len(recv)]; len(recv) > 0 && &own[0] != &recv[0] {
			copy(recv, own)
		}
		s.leaveEager(false)
		return nil
	}
	err := s.eagerGet(recv, at, root)
	if err == nil || !s.broken {
		s.leaveEager(false)
	}
	return err
}

// eagerRefuse is refuse for a call that goes eager: the refusal goes into
// this rank's slot, where its readers look if it is their root, and
// nowhere else (a reader's refusal concerns no one: its root and the other
// readers finish). The slot may have to wait for its last readers, bounded
// as refuse's waits are.
func (s *stepper) eagerRefuse(why error) error {
	b := &s.b
	if b.ctx.Err() != nil {
		b = &bound{ctx: context.Background(), timeout: b.timeout}
	}
	status := uint32(tier.FailCodeOf(why))
	s.enterEager(status)
	if err := s.eagerPut(b, status, nil, why.Error()); err != nil {
		s.broken = true
		return err
	}
	s.leaveEager(true)
	return why
}

// eagerPut writes this rank's slot of the collective of s: status, and
// msg or reason. It first makes sure that every peer is still attached
// (an eager root waits for nobody, and would not learn of a failure
// otherwise) and has done with the collective the slot holds.
func (s *stepper) eagerPut(b *bound, status uint32, msg []byte, reason string) error {
	c, x := s.c, &s.c.x
	for q := range c.size {
		if q != c.rank {
			if err := c.peerState(q); err != nil {
				if perr := s.eagerProbe(c.rank, nil); perr != nil {
					return perr // why q gave up, as this rank sees it
				}
				return err
			}
		}
	}
	slot := s.eagerSlot(c.rank)
	seq := u64At(slot, mSeq)
	if prev := atomic.LoadUint64(seq); prev != 0 {
		ready := func(q int) bool {
			if x.done[q] < prev {
				x.done[q] = atomic.LoadUint64(u64At(c.eagerLine(q), eDone))
			}
			return x.done[q] >= prev
		}
		if err := c.wait(b, x.watch, waitOn{ready: ready, only: -1}); err != nil {
			return err
		}
	}
	s.fillMeta(slot, status, reason)
	copy(slot[mReason:], msg)
	atomic.StoreUint64(seq, s.o.seq)
	chime(c.mine.bell, c.mine.sleepers)
	return nil
}

// eagerGet waits for root's slot of the collective of s and copies its
// message, from byte at on, into buf.
func (s *stepper) eagerGet(buf []byte, at, root int) error {
	msg, err := s.eagerFrom(root)
	if err != nil {
		return err
	}
	copy(buf, msg[at:])
	return nil
}

// eagerFrom waits for rank q's slot of the collective of s and returns
// what q staged there, after checking that q took part with this rank's
// call: a refusal is q's *comm.RemoteError, another call a mismatch.
// The slot is q's until this rank says it is done (leaveEager).
func (s *stepper) eagerFrom(q int) ([]byte, error) {
	c, o := s.c, s.o
	slot := s.eagerSlot(q)
	seq := u64At(slot, mSeq)
	if atomic.LoadUint64(seq) != o.seq {
		ready := func(int) bool { return atomic.LoadUint64(seq) == o.seq }
		on := waitOn{ready: ready, only: q, probe: func() error { return s.eagerProbe(q, ready) }}
		if err := c.wait(&s.b, c.x.watch, on); err != nil {
			s.broken = true
			return nil, err
		}
	}
	m := readMeta(slot)
	switch {
	case m.status != statusGo:
		return nil, c.named(tier.FailCode(m.status).Remote(q, m.reason))
	case m.sig != o.sig:
		s.broken = true
		return nil, &comm.MismatchError{Peer: q, Seq: o.seq, Local: o.sig, Remote: m.sig}
	}
	return slot[mReason:], nil
}

// eagerToRoot is an eager Gather, or with reduce an eager Reduce, to
// root: every rank stages its input (send) in its slot and, but the root,
// returns; the root waits for every peer's slot, and gathers the blocks
// into recv (its own from send) or reduces them with k in rank order,
// its own from its slot too (its recv may be its send), and then says it
// is done, which frees the slots for their next collectives. A rank's
// staging waits, as a Broadcast root's, only when its slot still holds
// a collective a peer is not done with: non-roots run ahead of their
// root by up to a ring of slots.
func eagerToRoot(s *stepper, send, recv []byte, k tier.Kernel, reduce bool, root int) error {
	c := s.c
	s.enterEager(statusGo)
	if c.rank != root || reduce {
		if err := s.eagerPut(&s.b, statusGo, send, ""); err != nil {
			s.broken = true
			return err
		}
	}
	if c.rank != root {
		s.leaveEager(false)
		return nil
	}
	err := s.eagerCollect(send, recv, k, reduce)
	if err == nil || !s.broken {
		s.leaveEager(false)
	}
	return err
}

// eagerCollect is the root's part of eagerToRoot, after its own staging.
func (s *stepper) eagerCollect(send, recv []byte, k tier.Kernel, reduce bool) error {
	c := s.c
	blk := len(send)
	if !reduce {
		for q := range c.size {
			if q == c.rank {
				copy(recv[q*blk:(q+1)*blk], send) // Validate refuses a send inside recv
				continue
			}
			msg, err := s.eagerFrom(q)
			if err != nil {
				return err
			}
			copy(recv[q*blk:(q+1)*blk], msg[:blk])
		}
		return nil
	}
	// Every rank's part stays in its slot until this root is done, so
	// the reduction reads them all in rank order, its own included.
	parts := s.c.x.parts[:0]
	for q := range c.size {
		part := s.eagerSlot(q)[mReason:]
		if q != c.rank {
			var err error
			if part, err = s.eagerFrom(q); err != nil {
				return err
			}
		}
		parts = append(parts, part[:blk])
	}
	s.c.x.parts = parts
	reduceInto(k, recv, nil, nil, c.size, func(q int) []byte { return parts[q] })
	return nil
}

// eagerLineOf reads rank q's eager line: the eager collective it is in,
// or ok false while q rewrites it.
func (c *Comm) eagerLineOf(q int) (m peerMeta, ok bool) {
	line := c.eagerLine(q)
	seq := atomic.LoadUint64(u64At(line, mSeq))
	m = readMeta(line[:mReason])
	return m, seq != 0 && atomic.LoadUint64(u64At(line, mSeq)) == seq && m.seq == seq
}

// eagerProbe is the mismatch of the eager collective of s that this
// rank's peers' words show: a peer whose eager line is at this collective
// with another call, or whose latest header is of this collective; and,
// where root is a peer that has not written its slot (ready false), a root
// whose eager line or header is past this collective. Readers ask it
// while they wait; a root whose peer gave up, before it takes that peer's
// word for the failure.
func (s *stepper) eagerProbe(root int, ready func(int) bool) error {
	for q := range s.c.size {
		if q == s.c.rank {
			continue
		}
		var r func(int) bool
		if q == root {
			r = ready
		}
		if err := s.eagerPeer(q, r); err != nil {
			return err
		}
	}
	return nil
}

// eagerPeer is eagerProbe for peer q; ready is nil unless q is the root.
func (s *stepper) eagerPeer(q int, ready func(int) bool) error {
	c, o := s.c, s.o
	e, ok := c.eagerLineOf(q)
	h := s.meta(q, 0)
	if h1 := s.meta(q, 1); h1.seq > h.seq {
		h = h1
	}
	switch {
	case ok && e.seq == o.seq && e.status == statusGo && e.sig != o.sig:
		return &comm.MismatchError{Peer: q, Seq: o.seq, Local: o.sig, Remote: e.sig}
	case h.seq == o.seq && h.status != statusGo:
		// q refused this collective, and its refusal went the staged
		// way: a refused call may say anything (a composer refuses its
		// part's call with empty buffers), so q's call did not go eager
		// where this rank's did. It is q's refusal, not a mismatch.
		return c.named(tier.FailCode(h.status).Remote(q, h.reason))
	case h.seq == o.seq:
		return &comm.MismatchError{Peer: q, Seq: o.seq, Local: o.sig, Remote: h.sig}
	case ready == nil || ready(q): // a reader goes on; a root wrote its slot, then went on
		return nil
	case ok && e.seq > o.seq:
		return s.elsewhere(q, e.seq)
	case h.seq > o.seq:
		return s.elsewhere(q, h.seq)
	}
	return nil
}

// eagerPast is the mismatch of a rank waiting in the header step g of the
// collective of s for a peer that is in an eager collective of the same
// sequence number, or past it, and so will not post g; that is or was in
// the eager collective this rank last took part in with another call
// (this rank only staged its part, and returned: a peer that posted g
// since shows it too, which checkHeaders would find once every header
// is posted, but a rank still waiting for another, whom a third rank's
// leaving over that mismatch ends, learns the mismatch, not the
// leaving); or that posted g for another collective (it was behind: this
// rank passed an eager one that it did not take part in), which
// checkHeaders would find, but a rank that waits for a third one learns
// it now, not from that peer's abort.
func (s *stepper) eagerPast(g uint64) error {
	c, o, x := s.c, s.o, &s.c.x
	if c.seg.l.eagerBytes == 0 {
		return nil
	}
	for q := range c.size {
		if q == c.rank {
			continue
		}
		e, ok := c.eagerLineOf(q)
		if ok && e.seq < o.seq && e.seq == x.eagerLast && x.eagerSeen&eagerWild == 0 && e.status == statusGo && e.sig != x.eagerSig {
			// q is still in, or last took part in, the eager collective
			// this rank last finished, with another call: a mismatch
			// that this rank's part could not see (it only staged), and
			// a reason for q to be stuck there.
			return &comm.MismatchError{Peer: q, Seq: e.seq, Local: x.eagerSig, Remote: e.sig}
		}
		if atomic.LoadUint64(c.words[q].posted) >= g {
			if h := s.meta(q, g); h.seq != o.seq {
				return s.elsewhere(q, h.seq)
			}
			continue
		}
		if !ok || e.seq < o.seq || atomic.LoadUint64(c.words[q].posted) >= g {
			continue
		}
		if e.seq == o.seq {
			return &comm.MismatchError{Peer: q, Seq: o.seq, Local: o.sig, Remote: e.sig}
		}
		return s.elsewhere(q, e.seq)
	}
	return nil
}

// checkEager compares the eager collectives every rank took part in since
// the last header, as the headers of step g count and digest them, unless
// a rank refused one.
func (s *stepper) checkEager(g uint64) error {
	c, x := s.c, &s.c.x
	l := &c.seg.l
	differs := -1 // the first peer whose count or digest differs
	for q := range c.size {
		if q == c.rank {
			continue
		}
		m := c.seg.mem[l.meta(q, g%2):]
		seen, sum := binary.LittleEndian.Uint32(m[mEagerSeen:]), binary.LittleEndian.Uint64(m[mEagerSum:])
		if (seen|x.eagerSeen)&eagerWild != 0 {
			return nil
		}
		if differs < 0 && (seen != x.eagerSeen || sum != x.eagerSum) {
			differs = q
		}
	}
	if differs < 0 {
		return nil
	}
	// The mismatch is of one of the eager collectives since the last
	// header, the first of them as far as this rank can tell: the first
	// eager one it took part in, or, where it took part in none, the
	// first after that header.
	n := binary.LittleEndian.Uint32(c.seg.mem[l.meta(differs, g%2)+mEagerSeen:])
	me := &comm.MismatchError{Peer: differs, Seq: x.header + 1,
		Reported: fmt.Sprintf("the eager collectives from #%d to #%d differ between rank %d (%d of them) and this rank (%d): their kinds, roots, dtypes or counts disagree",
			x.header+1, s.o.seq-1, differs, n, x.eagerSeen)}
	if x.eagerSeen != 0 {
		me.Seq = x.eagerFirst
	}
	if x.eagerSeen == 1 {
		me.Local = x.eagerSig
	}
	return me
}
