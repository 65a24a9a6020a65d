package shm

import (
	"sync/atomic"
	"unsafe"
)

// Where everything sits in a segment. All offsets are from the start of the
// mapping, which is page-aligned, so an offset aligned for a type is an
// address aligned for it; the hot words of different writers are on
// different lines (lineBytes covers a pair of cache lines, since adjacent-line
// prefetch couples neighbours).
//
//	header        one page: magic, version, size, slot, ring and step sizes, creator
//	control[P]    per rank: step counter, bell, state, sleepers, identity,
//	              heartbeat, p2p bell, abort record, two meta parts
//	ringCtl[P×P]  per (sender, receiver): tail (sender's line), head (receiver's)
//	slots[P]      per rank: two parts of SlotBytes/2, the staging of steps
//	rings[P×P]    per (sender, receiver): the bytes of Send/Recv messages
//	eager[P]      per rank: its eager line (the eager collective it is in,
//	              the last one it is done with), then eagerSmallSlots
//	              slots of tiny messages and eagerSlots of larger ones, for
//	              the eager broadcasts it roots (eager.go); none when eager
//	              broadcasts are off
//
// Every word is written by one rank only (its owner: the rank of the
// control block, the sender for a tail, the receiver for a head), except
// the sleeper counts, which waiters add to.

const (
	lineBytes = 128
	pageBytes = 4096

	segMagic   = 0x314d485352454948 // "HIERSHM1", little-endian
	segVersion = 3
)

// Header fields. hMagic and hCreator keep their places in every version, so
// that a stale file of another version can still be judged.
const (
	hMagic      = 0  // u64
	hVersion    = 8  // u32
	hSize       = 12 // u32
	hSlotBytes  = 16 // u64
	hRingBytes  = 24 // u64
	hTotal      = 32 // u64
	hStepBytes  = 40 // u64: stepBytes of the creator; every rank's schedules use it
	hEagerBytes = 48 // u64: eagerBytes of the creator (0: no eager broadcasts); every rank's choice of schedule uses it
	hCreator    = 64 // procID: pid, start, pid namespace (3 × u64)
)

// Control block fields, from the start of a rank's block.
const (
	cPosted      = 0             // u64: the last step this rank posted
	cBell        = 8             // u32: bumped at every post and state change; futex word
	cState       = 12            // u32: stateFree, stateAttached, stateClosed, stateAborted
	cCPU         = 16            // u32: the CPU the rank last ran on when it posted or waited, plus one (0: unknown); a hint for waiters
	cSleepers    = lineBytes     // u32: waiters asleep on cBell
	cProc        = 2 * lineBytes // procID of the attached process (3 × u64)
	cHeartbeat   = 3 * lineBytes // u64: bumped every FailureTimeout/5
	cP2PBell     = 4 * lineBytes // u32: bumped when a ring to or from this rank moves
	cP2PSleepers = 5 * lineBytes // u32
	cAbort       = 6 * lineBytes // abort record, see aCode…
	cMeta        = 2048          // two meta parts
)

// Abort record fields, from cAbort: why the rank aborted, the failed peer
// it names (or -1), the last step it posted, when it aborted, and the
// cause as text.
const (
	aCode     = 0  // u32
	aPeer     = 4  // i32
	aLen      = 8  // u32
	aFlags    = 12 // u32: abortOutside, abortPassed
	aStep     = 16 // u64
	aTime     = 24 // i64: the host's wall clock, Unix nanoseconds (stallWatch.explains)
	aText     = 32
	abortText = cMeta - cAbort - aText
)

// abortOutside, in an abort record's flags: the peer it names is a rank of
// the composed communicator that aborted this one (comm.Blame.Outside).
const abortOutside = 1

// abortPassed, in an abort record's flags: the rank had seen every peer
// post its last step before it aborted, so it did not give up waiting in
// that step (it finished its collective, then aborted on news of a later
// failure).
const abortPassed = 2

// Meta part fields: what a rank says about the collective of its header step.
const (
	mSeq       = 0  // u64
	mStatus    = 8  // u32
	mKind      = 12 // u8, then dtype u8, op u8
	mRoot      = 16 // i32
	mCount     = 24 // i64
	mReasonLen = 32 // u32
	mOuter     = 36 // u8 kind, u8 dtype, u8 op of Sig.Outer
	mOuterHash = 40 // u32
	mEagerSeen = 44 // u32: a header's eager collectives since the last header, plus eagerWild if this rank refused one
	mEagerSum  = 48 // u64: a header's digest of those eager collectives (eager.go)
	mReason    = 64 // up to maxReason bytes
	mCounts    = 512
	maxReason  = mCounts - mReason
)

// Rank states.
const (
	stateFree uint32 = iota
	stateAttached
	stateClosed
	stateAborted
)

// procID names a process on the host: pid, start time (clock ticks since
// boot) and pid namespace, so that a reused pid is not taken for its
// predecessor.
type procID struct{ pid, start, ns uint64 }

// layout is the geometry of a segment for P ranks.
type layout struct {
	P                       int
	slotBytes, ringBytes    int
	stepBytes               int // see copy.go
	eagerBytes              int // the largest eager broadcast (Config.EagerBytes); 0: none
	eagerSlot, eagerRank    int // bytes of an eager slot (a large one), and of a rank's eager area
	eagerOff                int
	metaBytes, ctlBytes     int
	ctlOff, ringCtlOff      int
	slotsOff, ringsOff, end int
}

func alignUp(n, a int) int { return (n + a - 1) / a * a }

// newLayout computes the geometry; slotBytes is a multiple of 2·lineBytes,
// stepBytes is Config.StepBytes (see copy.go), eagerBytes
// Config.EagerBytes (0: no eager area; see eager.go).
// A ring gets a share of a slot's size (at most a quarter of it, at least a
// page), so that the rings of all P² pairs take half what the slots do: 8
// ranks with the default slots need 48 MiB, inside Docker's default 64 MiB
// /dev/shm.
func newLayout(P, slotBytes, stepBytes, eagerBytes int) layout {
	l := layout{P: P, slotBytes: slotBytes, stepBytes: stepBytes, eagerBytes: eagerBytes}
	l.ringBytes = max(pageBytes, min(slotBytes/4, slotBytes/(2*P))&^(pageBytes-1))
	l.metaBytes = alignUp(mCounts+16*P, lineBytes)
	l.ctlBytes = alignUp(cMeta+2*l.metaBytes, pageBytes)
	l.ctlOff = pageBytes
	l.ringCtlOff = l.ctlOff + P*l.ctlBytes
	l.slotsOff = alignUp(l.ringCtlOff+P*P*2*lineBytes, pageBytes)
	l.ringsOff = l.slotsOff + P*slotBytes
	l.placeEager()
	return l
}

// placeEager sizes and places the eager areas, after the rings.
func (l *layout) placeEager() {
	l.eagerOff = l.ringsOff + l.P*l.P*l.ringBytes
	l.eagerSlot, l.eagerRank = 0, 0
	if l.eagerBytes > 0 {
		l.eagerSlot = alignUp(mReason+l.eagerBytes, lineBytes)
		l.eagerRank = lineBytes + eagerSmallSlots*eagerSmallSlot + eagerSlots*l.eagerSlot
	}
	l.end = l.eagerOff + l.P*l.eagerRank
}

// fits reports whether l, as layoutOf read it from a segment's header, is
// a geometry this build's newLayout makes from a valid Config and lies
// within size bytes. A header written by another build or scribbled on
// must not send a reader outside the mapping, nor make it size anything
// by a number it has not checked: the sizes are bounded (by size and P)
// before anything is computed from them, so nothing overflows.
func (l layout) fits(size int64) bool {
	if l.P < 1 || l.P > maxSize || l.stepBytes < 1 || l.eagerBytes < 0 || l.eagerBytes > maxEagerBytes ||
		l.slotBytes < minSlotBytes&^(2*lineBytes-1) || l.slotBytes%(2*lineBytes) != 0 ||
		l.ringBytes < pageBytes || l.ringBytes%pageBytes != 0 {
		return false
	}
	P := int64(l.P)
	if int64(l.slotBytes) > size/P || int64(l.ringBytes) > size/(P*P) {
		return false
	}
	return int64(l.slotsOff) <= size && int64(l.end) <= size
}

// layoutOf reads the geometry from a segment's header; fits says whether
// it may be used.
func layoutOf(mem []byte) layout {
	P := int(atomic.LoadUint32(u32At(mem, hSize)))
	if P < 1 || P > maxSize {
		return layout{P: P} // newLayout divides by P; fits refuses it
	}
	eager := atomic.LoadUint64(u64At(mem, hEagerBytes))
	if eager > maxEagerBytes {
		return layout{P: P, eagerBytes: -1} // fits refuses it
	}
	l := newLayout(P, int(atomic.LoadUint64(u64At(mem, hSlotBytes))), int(atomic.LoadUint64(u64At(mem, hStepBytes))), int(eager))
	l.ringBytes = int(atomic.LoadUint64(u64At(mem, hRingBytes)))
	l.ringsOff = l.slotsOff + P*l.slotBytes
	l.placeEager()
	return l
}

func u32At(mem []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
func u64At(mem []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&mem[off])) }

func (l layout) ctl(r int) int               { return l.ctlOff + r*l.ctlBytes }
func (l layout) meta(r int, part uint64) int { return l.ctl(r) + cMeta + int(part)*l.metaBytes }
func (l layout) slot(r int) int              { return l.slotsOff + r*l.slotBytes }
func (l layout) ringCtl(src, dst int) int    { return l.ringCtlOff + (src*l.P+dst)*2*lineBytes }
func (l layout) ring(src, dst int) int       { return l.ringsOff + (src*l.P+dst)*l.ringBytes }
func (l layout) eagerLine(r int) int         { return l.eagerOff + r*l.eagerRank }

// eagerAt is the offset of rank r's slot for collective #seq: a small
// slot (eagerSmallSlot bytes) for a message of at most eagerSmall bytes,
// else a large one (eagerSlot).
func (l layout) eagerAt(r int, seq uint64, small bool) int {
	base := l.eagerLine(r) + lineBytes
	if small {
		return base + int(seq%eagerSmallSlots)*eagerSmallSlot
	}
	return base + eagerSmallSlots*eagerSmallSlot + int(seq%eagerSlots)*l.eagerSlot
}

// rankWords are the shared words of one rank's control block.
type rankWords struct {
	posted      *uint64
	bell        *uint32
	state       *uint32
	cpu         *uint32
	sleepers    *uint32
	heartbeat   *uint64
	p2pBell     *uint32
	p2pSleepers *uint32
}

func wordsOf(mem []byte, l layout, r int) rankWords {
	b := l.ctl(r)
	return rankWords{
		posted:      u64At(mem, b+cPosted),
		bell:        u32At(mem, b+cBell),
		state:       u32At(mem, b+cState),
		cpu:         u32At(mem, b+cCPU),
		sleepers:    u32At(mem, b+cSleepers),
		heartbeat:   u64At(mem, b+cHeartbeat),
		p2pBell:     u32At(mem, b+cP2PBell),
		p2pSleepers: u32At(mem, b+cP2PSleepers),
	}
}

// readProc and writeProc move a procID in and out of shared memory. A
// reader may see the pid before the rest (register claims a block with a
// compare-and-swap on the pid word, then writes the rest); a procID whose
// namespace is still 0 is "unknown", never taken for gone.
func readProc(mem []byte, off int) procID {
	return procID{
		pid:   atomic.LoadUint64(u64At(mem, off)),
		start: atomic.LoadUint64(u64At(mem, off+8)),
		ns:    atomic.LoadUint64(u64At(mem, off+16)),
	}
}

func writeProc(mem []byte, off int, p procID) {
	atomic.StoreUint64(u64At(mem, off+8), p.start)
	atomic.StoreUint64(u64At(mem, off+16), p.ns)
	atomic.StoreUint64(u64At(mem, off), p.pid)
}
