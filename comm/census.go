package comm

import ()

// The census is how a composed communicator finds a mismatch that none of
// its parts can see. Its collectives take different routes (a small
// Broadcast goes whole through the world part, an AllReduce through the
// nodes and the rails), so when ranks disagree on the kind of a call the
// parts may never meet both calls: every rank waits on a peer that waits
// elsewhere. A rank that has waited longer than its call should take asks
// every rank, over the part that reaches them all (Control's census), where
// it stands: the last collective it started and the user's calls of its
// latest CensusWindow collectives. Comparing them with its own (tier.Judge) is
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
