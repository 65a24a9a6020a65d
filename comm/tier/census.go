package tier

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
)

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
func AppendProgress(b []byte, p comm.Progress) []byte {
	b = binary.LittleEndian.AppendUint64(b, p.Started)
	k := min(p.Started, comm.CensusWindow)
	flags := byte(0)
	if p.Stopped {
		flags = stoppedBit
	}
	b = append(b, byte(k)|flags)
	for i := range k { // by i: a loop to s ≤ Started would not end at Started 2⁶⁴−1
		c := p.Calls[(p.Started-k+1+i)%comm.CensusWindow]
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
func DecodeProgress(b []byte) (comm.Progress, error) {
	var p comm.Progress
	if len(b) < 9 {
		return p, fmt.Errorf("%w: %d bytes", errProgress, len(b))
	}
	p.Started = binary.LittleEndian.Uint64(b)
	p.Stopped = b[8]&stoppedBit != 0
	k := uint64(b[8] &^ stoppedBit)
	b = b[9:]
	if k > comm.CensusWindow || k > p.Started || uint64(len(b)) != k*progressCall {
		return comm.Progress{}, fmt.Errorf("%w: %d calls up to #%d in %d bytes", errProgress, k, p.Started, len(b))
	}
	for i := range k { // by i, as in AppendProgress (a peer's bytes may say Started 2⁶⁴−1)
		s := p.Started - k + 1 + i
		p.Calls[s%comm.CensusWindow] = comm.Signature{Kind: comm.Kind(b[0]), DType: comm.DType(b[1]), Op: comm.ReduceOp(b[2]),
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
func Judge(rank int, mine comm.Progress, seq uint64, answers []comm.Progress, answered []bool) (me *comm.MismatchError, behind bool) {
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
func anyBehind(rank int, seq uint64, answers []comm.Progress, answered []bool) bool {
	for r, p := range answers {
		if r != rank && r < len(answered) && answered[r] && !p.Stopped && p.Started < seq {
			return true
		}
	}
	return false
}

// firstDifference is Judge's mismatch before the check that every rank
// that answered has started it.
func firstDifference(rank int, mine comm.Progress, seq uint64, answers []comm.Progress, answered []bool) *comm.MismatchError {
	from := uint64(1)
	if seq >= comm.CensusWindow {
		from = seq - comm.CensusWindow + 1
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
				return &comm.MismatchError{Peer: r, Seq: s, Local: local, Remote: remote}
			}
		}
	}
	return nil
}
