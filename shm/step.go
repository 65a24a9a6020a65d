package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/internal/hoptrace"
)

// stepper runs the steps of one collective on this rank. The first step is
// also the header: with it every rank publishes, in its meta part, the
// collective's sequence number, its Signature and its status (go, or why it
// refuses), and checks everyone else's after the wait. So a bad argument,
// an expired context or a mismatch is known to every rank after exactly one
// step, and they all agree on how many steps the collective took.
type stepper struct {
	c      *Comm
	o      *op
	b      bound // the collective's bounds, for every wait of its steps
	header bool  // the header step is done
	// counts is written into the meta part with the header: AllToAllV's
	// send and recv counts, Split's color and key.
	counts []int64
	broken bool // a failure after this rank's header said go
}

// statusGo is the header status of a rank that takes part; a rank that
// refuses the collective writes why, a tier.FailCode (always below it).
const statusGo uint32 = 1 << 31

// half is the size of a slot's part.
func (s *stepper) half() int { return s.c.seg.l.slotBytes / 2 }

// stepMax bounds the bytes of its message that a rank moves through one
// step: the creator's stepBytes, from the segment's header, so that every
// rank cuts a message into the same steps.
func (s *stepper) stepMax() int { return s.c.seg.l.stepBytes }

// part is rank q's part of step g.
func (s *stepper) part(q int, g uint64) []byte {
	l := &s.c.seg.l
	off := l.slot(q) + int(g%2)*(l.slotBytes/2)
	return s.c.seg.mem[off : off+l.slotBytes/2 : off+l.slotBytes/2]
}

// cur is the step of the last call to step: after it returns, the parts
// of step cur are readable.
func (s *stepper) cur() uint64 { return s.c.x.g }

// read is rank q's part of the current step.
func (s *stepper) read(q int) []byte { return s.part(q, s.cur()) }

// next is this rank's part of the next step, which it may write once the
// current step's wait is over (every peer has finished with it).
func (s *stepper) next() []byte { return s.part(s.c.rank, s.cur()+1) }

// ensureSeen waits, if this rank refused the previous collective without
// waiting, until every peer has posted the last step, so that the part the
// next step writes is no longer read.
func (s *stepper) ensureSeen(b *bound) error {
	x := &s.c.x
	if x.seen >= x.g {
		return nil
	}
	if err := s.c.waitAll(b, x.g, x.watch); err != nil {
		return err
	}
	x.seen = x.g
	return nil
}

// step runs one step: write (if not nil) fills this rank's part, then the
// rank posts the step and waits for every peer. The first call is the
// header step.
func (s *stepper) step(write func(part []byte)) error {
	c, x := s.c, &s.c.x
	if err := s.ensureSeen(&s.b); err != nil {
		// Even before the header: the peers wait for a header this rank
		// can no longer post in its place.
		s.broken = true
		return err
	}
	g := x.g + 1
	if !s.header {
		s.writeMeta(g, statusGo, "")
	}
	if write != nil {
		write(s.part(c.rank, g))
	}
	c.post(g)
	c.mark(hoptrace.ShmPosted, g)
	x.g = g
	on := waitOn{ready: func(q int) bool { return atomic.LoadUint64(c.words[q].posted) >= g }, only: -1, step: g}
	if !s.header {
		// A peer in an eager collective of this sequence number, or
		// past it, will not post this header: a mismatch (eager.go).
		on.probe = func() error { return s.eagerPast(g) }
	}
	err := c.wait(&s.b, x.watch, on)
	if err != nil {
		s.broken = true
		if !s.header && errors.Is(err, comm.ErrTimeout) {
			err = s.late(g, err)
		}
		return err
	}
	c.mark(hoptrace.ShmSeen, g)
	x.seen = g
	if !s.header {
		s.header = true
		err = s.checkHeaders(g)
		x.eagerHeader(s.o.seq)
	}
	return err
}

// refuse runs the header step of a collective this rank refuses, with the
// reason for its peers, and returns at once: the wait for the peers moves
// to the next collective (ensureSeen). Only consecutive refusals wait
// here, with the refused call's context if it is still alive.
func (s *stepper) refuse(why error) error {
	c, x := s.c, &s.c.x
	if c.eager(s.o.sig) {
		return s.eagerRefuse(why)
	}
	if x.seen < x.g {
		b := &s.b
		if b.ctx.Err() != nil {
			b = &bound{ctx: context.Background(), timeout: b.timeout}
		}
		if err := s.ensureSeen(b); err != nil {
			s.broken = true
			return err
		}
	}
	g := x.g + 1
	s.writeMeta(g, uint32(tier.FailCodeOf(why)), why.Error())
	c.post(g)
	x.g = g
	x.eagerHeader(s.o.seq)
	return why
}

// late is err, a deadline that passed in g, the header step of this
// collective, as a *comm.LateError that names the peers that had not
// started the collective: those that had not posted g, and whose latest
// header (the larger sequence number of their two meta parts, which only
// headers write) is of an earlier collective; Last is that one. Ranks are
// named by their job rank first where Config.Ranks says it. err is
// returned as it is when every peer had started (a slow one, not a
// straggler).
func (s *stepper) late(g uint64, err error) error {
	c := s.c
	le := &comm.LateError{Err: err, Seq: s.o.seq}
	for q := range c.size {
		if q == c.rank || atomic.LoadUint64(c.words[q].posted) >= g {
			continue
		}
		last := max(s.meta(q, 0).seq, s.meta(q, 1).seq)
		if last >= s.o.seq {
			continue
		}
		le.Ranks = append(le.Ranks, q)
		le.Last = append(le.Last, last)
		if c.cfg.Ranks != nil {
			le.Who = append(le.Who, c.rankName(q))
		}
	}
	if len(le.Ranks) == 0 {
		return err
	}
	return le
}

// writeMeta fills this rank's meta part of step g, with the eager
// collectives since the last header (eagerSeen, eagerSum). Plain stores:
// the post that follows publishes them.
func (s *stepper) writeMeta(g uint64, status uint32, reason string) {
	l, x := &s.c.seg.l, &s.c.x
	off := l.meta(s.c.rank, g%2)
	m := s.c.seg.mem[off : off+l.metaBytes]
	binary.LittleEndian.PutUint64(m[mSeq:], s.o.seq)
	s.fillMeta(m, status, reason)
	binary.LittleEndian.PutUint32(m[mEagerSeen:], x.eagerSeen)
	binary.LittleEndian.PutUint64(m[mEagerSum:], x.eagerSum)
}

// fillMeta writes what this rank says about its collective, all but the
// sequence number, into m, a meta part or an eager slot or line (eager.go),
// whose reason is cut to what m holds.
func (s *stepper) fillMeta(m []byte, status uint32, reason string) {
	sig := s.o.sig
	binary.LittleEndian.PutUint32(m[mStatus:], status)
	m[mKind], m[mKind+1], m[mKind+2] = byte(sig.Kind), byte(sig.DType), byte(sig.Op)
	binary.LittleEndian.PutUint32(m[mRoot:], uint32(sig.Root))
	binary.LittleEndian.PutUint64(m[mCount:], uint64(sig.Count))
	m[mOuter], m[mOuter+1], m[mOuter+2] = byte(sig.Outer.Kind), byte(sig.Outer.DType), byte(sig.Outer.Op)
	binary.LittleEndian.PutUint32(m[mOuterHash:], sig.Outer.Hash)
	n := copy(m[mReason:min(len(m), mReason+maxReason)], reason)
	binary.LittleEndian.PutUint32(m[mReasonLen:], uint32(n))
	for i, v := range s.counts {
		binary.LittleEndian.PutUint64(m[mCounts+8*i:], uint64(v))
	}
}

// peerMeta is what rank q published with its header.
type peerMeta struct {
	seq    uint64
	status uint32
	sig    comm.Signature
	reason string
	// eagerSeen and eagerSum: the eager collectives q took part in
	// since its last header (eager.go); headers only.
	eagerSeen uint32
	eagerSum  uint64
}

func (s *stepper) meta(q int, g uint64) peerMeta {
	l := &s.c.seg.l
	off := l.meta(q, g%2)
	return readMeta(s.c.seg.mem[off : off+l.metaBytes])
}

// readMeta reads what fillMeta and writeMeta wrote into m; a reason is
// cut to what m holds.
func readMeta(m []byte) peerMeta {
	n := min(int(binary.LittleEndian.Uint32(m[mReasonLen:])), maxReason, len(m)-mReason)
	return peerMeta{
		seq:    binary.LittleEndian.Uint64(m[mSeq:]),
		status: binary.LittleEndian.Uint32(m[mStatus:]),
		sig: comm.Signature{Kind: comm.Kind(m[mKind]), DType: comm.DType(m[mKind+1]), Op: comm.ReduceOp(m[mKind+2]),
			Root: int32(binary.LittleEndian.Uint32(m[mRoot:])), Count: int64(binary.LittleEndian.Uint64(m[mCount:])),
			Outer: comm.Outer{Kind: comm.Kind(m[mOuter]), DType: comm.DType(m[mOuter+1]), Op: comm.ReduceOp(m[mOuter+2]),
				Hash: binary.LittleEndian.Uint32(m[mOuterHash:])}},
		reason:    string(m[mReason : mReason+n]),
		eagerSeen: binary.LittleEndian.Uint32(m[mEagerSeen:]),
		eagerSum:  binary.LittleEndian.Uint64(m[mEagerSum:]),
	}
}

// peerCount is entry i of rank q's counts in its header.
func (s *stepper) peerCount(q int, g uint64, i int) int64 {
	l := &s.c.seg.l
	off := l.meta(q, g%2) + mCounts + 8*i
	return int64(binary.LittleEndian.Uint64(s.c.seg.mem[off:]))
}

// checkHeaders compares every peer's header of step g with this rank's.
// A peer that refused makes the collective fail here with a
// *comm.RemoteError (checked first: its Signature may be anything); a
// different Signature is a *comm.MismatchError, and so are eager
// collectives since the last header that the headers' digests say
// differ. Every rank sees the same headers, so every rank reaches the
// same verdict. A peer that aborted while it waited in this very header
// step (it posted, then its context ended, or it found a mismatch there)
// has left the collective: a rank that arrives after it gave up fails
// too, instead of completing a collective the others abandoned — with
// the mismatch, where the headers show one, which is why that peer left
// (it found it first, and this rank's call returns the same kind).
func (s *stepper) checkHeaders(g uint64) error {
	var mismatch, left error
	for q := range s.c.size {
		if q == s.c.rank {
			continue
		}
		m := s.meta(q, g)
		switch {
		case m.seq != s.o.seq:
			if mismatch == nil {
				mismatch = s.elsewhere(q, m.seq)
			}
		case m.status != statusGo:
			return s.c.named(tier.FailCode(m.status).Remote(q, m.reason))
		case m.sig != s.o.sig:
			if mismatch == nil {
				mismatch = &comm.MismatchError{Peer: q, Seq: s.o.seq, Local: s.o.sig, Remote: m.sig}
			}
		case left == nil && s.c.abortedHere(q, g):
			// q posted this header, then gave up waiting for the others
			// (its context ended): it has left this collective.
			left = s.c.abortError(q)
		}
	}
	if mismatch != nil {
		return mismatch
	}
	if err := s.checkEager(g); err != nil {
		return err
	}
	if left != nil {
		return left
	}
	if s.o.sig.Kind == comm.KindAllToAllV {
		return s.checkCounts(g)
	}
	return nil
}

// elsewhere is the mismatch of rank q, which was at collective #seq
// when this rank was at its own. It is of the earlier of the two: a rank
// behind did something else at the collective this rank passed (an eager
// one, which waits for no header: eager.go).
func (s *stepper) elsewhere(q int, seq uint64) error {
	me := &comm.MismatchError{Peer: q, Seq: s.o.seq, Local: s.o.sig,
		Reported: fmt.Sprintf("rank %d was at collective #%d when this rank was at #%d", q, seq, s.o.seq)}
	if x := &s.c.x; seq < s.o.seq {
		me.Seq, me.Local = seq, comm.Signature{}
		if x.eagerLast == seq {
			me.Local = x.eagerSig
		}
	}
	return me
}

// checkCounts checks that what every rank sends every other is what that
// one expects (AllToAllV), on every pair, so that every rank agrees.
func (s *stepper) checkCounts(g uint64) error {
	P := s.c.size
	for i := range P {
		for j := range P {
			sent, want := s.peerCount(i, g, j), s.peerCount(j, g, P+i)
			if sent != want {
				peer := i
				if peer == s.c.rank {
					peer = j
				}
				return &comm.MismatchError{Peer: peer, Seq: s.o.seq, Local: s.o.sig, Remote: s.o.sig,
					Reported: fmt.Sprintf("rank %d sends %d elements to rank %d, which expects %d", i, sent, j, want)}
			}
		}
	}
	return nil
}

// abortedHere reports whether peer q aborted while waiting in step g: it
// posted g last and had not seen every peer post it (abortPassed). One
// that had finished its collective and aborted on news of a later
// failure has not left this one.
func (c *Comm) abortedHere(q int, g uint64) bool {
	at, aborted := c.abortedAt(q)
	return aborted && at == g && atomic.LoadUint32(u32At(c.seg.mem, c.seg.l.ctl(q)+cAbort+aFlags))&abortPassed == 0
}
