package comm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The census is how a composed communicator finds a mismatch that none of
// its parts can see. Its collectives take different routes (a small
// Broadcast goes whole through the world part, an AllReduce through the
// nodes and the rails), so when ranks disagree on the kind of a call the
// parts may never meet both calls: every rank waits on a peer that waits
// elsewhere. A rank that has waited longer than its call should take asks
// every rank, over the part that reaches them all (Control's census), where
// it stands: the last collective it started and the user's calls of its
// latest CensusWindow collectives. Comparing them with its own (Judge) is
// a pure function of the answers, so the rule is the same on every tier
// and is tested without I/O.

// CensusWindow is how many of its latest collectives a rank reports in a
// census: a mismatch is found if it lies within this many collectives of
// the asker's (a rank whose part of a collective only sent may have gone
// on by a few).
const CensusWindow = 8

// Progress is where one rank of a composed communicator stands: what it
// answers a census. Its zero value is a rank that has started nothing.
type Progress struct {
	// Started is the last collective (sequence number, from 1) that began
	// to run on this rank; 0: none.
	Started uint64
	// Calls[s % CensusWindow] is the user's call of collective s, for the
	// last CensusWindow collectives up to Started (Call reads it).
	Calls [CensusWindow]Signature
	// Stopped says that the rank's communicator was aborted: it starts
	// no further collective (it is not behind, it has stopped).
	Stopped bool
}

// Record notes that collective seq, the user's call sig, began to run.
// Collectives are recorded in order: seq is Started+1. A call whose Kind
// is 0 is unknown and mismatches nothing: a composed communicator records
// so a call that this rank refused (a bad argument), which every rank
// abandons with the refusal, whatever the others called.
func (p *Progress) Record(seq uint64, sig Signature) {
	sig.Outer = Outer{}
	p.Started = seq
	p.Calls[seq%CensusWindow] = sig
}

// Call is the user's call of collective seq, and whether p still knows it.
func (p *Progress) Call(seq uint64) (Signature, bool) {
	if seq == 0 || seq > p.Started || p.Started-seq >= CensusWindow {
		return Signature{}, false
	}
	return p.Calls[seq%CensusWindow], true
}

// progressCall is the wire size of one call in AppendProgress's form;
// stoppedBit marks Progress.Stopped in its count byte.
const (
	progressCall = 15
	stoppedBit   = 0x80
)

// AppendProgress appends the wire form of p to b: Started (8 bytes), the
// number k of calls that follow (1 byte; its top bit set when Stopped),
// then the calls of collectives
// Started-k+1 … Started, each its Kind, DType and Op (a byte each), Root
// (int32) and Count (int64). Integers are little-endian.
func AppendProgress(b []byte, p Progress) []byte {
	b = binary.LittleEndian.AppendUint64(b, p.Started)
	k := min(p.Started, CensusWindow)
	flags := byte(0)
	if p.Stopped {
		flags = stoppedBit
	}
	b = append(b, byte(k)|flags)
	for s := p.Started - k + 1; s <= p.Started && k > 0; s++ {
		c := p.Calls[s%CensusWindow]
		b = append(b, byte(c.Kind), byte(c.DType), byte(c.Op))
		b = binary.LittleEndian.AppendUint32(b, uint32(c.Root))
		b = binary.LittleEndian.AppendUint64(b, uint64(c.Count))
	}
	return b
}

// errProgress is the error of a census answer that is not AppendProgress's
// form.
var errProgress = errors.New("comm: malformed census answer")

// DecodeProgress reads AppendProgress's form (bytes from a peer: anything
// else is an error, never a panic).
func DecodeProgress(b []byte) (Progress, error) {
	var p Progress
	if len(b) < 9 {
		return p, fmt.Errorf("%w: %d bytes", errProgress, len(b))
	}
	p.Started = binary.LittleEndian.Uint64(b)
	p.Stopped = b[8]&stoppedBit != 0
	k := uint64(b[8] &^ stoppedBit)
	b = b[9:]
	if k > CensusWindow || k > p.Started || uint64(len(b)) != k*progressCall {
		return Progress{}, fmt.Errorf("%w: %d calls up to #%d in %d bytes", errProgress, k, p.Started, len(b))
	}
	for s := p.Started - k + 1; k > 0 && s <= p.Started; s++ {
		p.Calls[s%CensusWindow] = Signature{Kind: Kind(b[0]), DType: DType(b[1]), Op: ReduceOp(b[2]),
			Root: int32(binary.LittleEndian.Uint32(b[3:])), Count: int64(binary.LittleEndian.Uint64(b[7:]))}
		b = b[progressCall:]
	}
	return p, nil
}

// Judge compares this rank's Progress (rank, mine) with the census answers
// (answers[r], where answered[r]) up to collective seq, this rank's
// current one: the first collective, in order, at which a rank that
// answered had made another call than this rank is a mismatch, returned
// naming the lowest such rank and both calls. An unknown call (Kind 0)
// agrees with any, and a rank that had not yet started a collective
// disagrees with nothing: it is late, not mismatched. No mismatch is
// returned while a rank that answered, and has not stopped, has not yet
// started the collective that differs: acting on the verdict aborts the
// communicator, which would fail that rank's earlier collective, one that
// every rank called alike and can complete. behind says so (or, with no
// difference, that a rank had not started seq): asked again once it has,
// the census may give the verdict.
func Judge(rank int, mine Progress, seq uint64, answers []Progress, answered []bool) (me *MismatchError, behind bool) {
	me = firstDifference(rank, mine, seq, answers, answered)
	if me == nil {
		return nil, anyBehind(rank, seq, answers, answered)
	}
	if anyBehind(rank, me.Seq, answers, answered) {
		return nil, true
	}
	return me, false
}

// anyBehind reports whether a rank other than rank that answered the
// census has not yet started collective seq, and may (it has not stopped).
func anyBehind(rank int, seq uint64, answers []Progress, answered []bool) bool {
	for r, p := range answers {
		if r != rank && r < len(answered) && answered[r] && !p.Stopped && p.Started < seq {
			return true
		}
	}
	return false
}

// firstDifference is Judge's mismatch before the check that every rank
// that answered has started it.
func firstDifference(rank int, mine Progress, seq uint64, answers []Progress, answered []bool) *MismatchError {
	from := uint64(1)
	if seq >= CensusWindow {
		from = seq - CensusWindow + 1
	}
	for s := from; s <= seq; s++ {
		local, ok := mine.Call(s)
		if !ok || local.Kind == 0 {
			continue
		}
		for r := range answers {
			if r == rank || r >= len(answered) || !answered[r] {
				continue
			}
			remote, ok := answers[r].Call(s)
			if ok && remote.Kind != 0 && remote != local {
				return &MismatchError{Peer: r, Seq: s, Local: local, Remote: remote}
			}
		}
	}
	return nil
}
