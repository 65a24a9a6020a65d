package tier

import (
	"errors"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// TestCulpritComesFirst checks what a user reads for a peer's failure,
// seen or heard, and what OpError.Culprit gives a program: the failed
// rank first, where this rank met it after, in one line.
func TestCulpritComesFirst(t *testing.T) {
	killed := errors.New("killed")
	heard := FailPeer.Blamed(1, comm.Blame{Rank: 3, How: "killed"}, "killed")
	for _, tc := range []struct {
		name    string
		err     *comm.OpError
		culprit int // -1: none
		want    string
		is      []error
	}{
		{"seen", &comm.OpError{Rank: 0, Peer: 3, Kind: comm.KindAllReduce, Seq: 41, Comm: "world", Err: &comm.PeerError{Peer: 3, Addr: "10.0.0.7:4000", Err: killed}}, 3,
			"rank 3 (10.0.0.7:4000) failed: killed; check that process's log — rank 0: AllReduce #41 on world (peer 3)",
			[]error{comm.ErrPeerFailed, killed}},
		{"heard", &comm.OpError{Rank: 2, Peer: 1, Kind: comm.KindBarrier, Seq: 7, Comm: "world", Err: heard}, 3,
			"rank 3 failed: killed (told by rank 1) — rank 2: Barrier #7 on world (peer 1)",
			[]error{comm.ErrPeerFailed, comm.ErrPeerAbandoned}},
		{"aborted earlier", &comm.OpError{Rank: 2, Peer: -1, Kind: comm.KindBarrier, Seq: 8, Comm: "world", Err: &comm.AbortedError{Cause: &comm.OpError{Rank: 2, Peer: 1, Kind: comm.KindBarrier, Seq: 7, Comm: "world", Err: heard}}}, 3,
			"rank 3 failed: killed (told by rank 1) — rank 2: Barrier #8 on world, the communicator aborted by it earlier",
			[]error{comm.ErrPeerFailed, comm.ErrPeerAbandoned, comm.ErrAborted}},
		{"through a part", &comm.OpError{Rank: 0, Peer: 6, Kind: comm.KindAllReduce, Seq: 1, Comm: "hierarchy",
			Err: &comm.PeerError{Peer: 6, Addr: "node 1, local 2", Err: &comm.ViaError{How: "it closed its communicator", Via: "through rail 0, from rank 4", Err: heard}}}, 6,
			"rank 6 (node 1, local 2) failed: it closed its communicator (through rail 0, from rank 4); check that process's log — rank 0: AllReduce #1 on hierarchy (peer 6)",
			[]error{comm.ErrPeerFailed, comm.ErrPeerAbandoned}},
		{"no culprit", &comm.OpError{Rank: 1, Peer: 2, Kind: comm.KindAllReduce, Seq: 3, Comm: "world", Err: FailTimeout.Remote(2, "timed out")}, -1,
			"rank 1: AllReduce #3 on world (peer 2): rank 2 ended the collective on its side: timed out",
			[]error{comm.ErrTimeout, comm.ErrPeerAbandoned}},
		{"a failure that names no rank", &comm.OpError{Rank: 1, Peer: 2, Kind: comm.KindAllReduce, Seq: 3, Comm: "world", Err: FailPeer.Remote(2, "some rank failed")}, -1,
			"rank 1: AllReduce #3 on world (peer 2): rank 2 ended the collective on its side: some rank failed",
			[]error{comm.ErrPeerFailed, comm.ErrPeerAbandoned}},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
		r, ok := tc.err.Culprit()
		if ok != (tc.culprit >= 0) || (ok && r != tc.culprit) {
			t.Errorf("%s: Culprit() = %d, %v, want %d", tc.name, r, ok, tc.culprit)
		}
		for _, s := range tc.is {
			if !errors.Is(tc.err, s) {
				t.Errorf("%s: not %v", tc.name, s)
			}
		}
	}
}

// A cause a composed communicator hands a part (FromOutside) blames a
// rank in the composer's numbering, also after it travels as a
// RemoteError; the part's own failures do not.
func TestCulpritFromOutside(t *testing.T) {
	pe := &comm.PeerError{Peer: 7, Addr: "node 1, local 3", Err: &comm.ViaError{How: "its process (pid 42) is gone", Via: "through node 1 shm"}}
	b, ok := comm.CulpritOf(&comm.AbortedError{Cause: FromOutside(&comm.OpError{Rank: 2, Peer: 7, Kind: comm.KindAllReduce, Err: pe})})
	if !ok || b.Rank != 7 || !b.Outside || b.How != "its process (pid 42) is gone" {
		t.Errorf("CulpritOf(FromOutside(…)) = %+v, %v; want rank 7 outside, what happened without the path", b, ok)
	}
	if b, ok := comm.CulpritOf(pe); !ok || b.Outside {
		t.Errorf("CulpritOf of a part's own PeerError = %+v, %v; want it not outside", b, ok)
	}
	re := FailPeer.Blamed(0, b, b.How)
	re.CulpritOutside = true
	if b2, ok := comm.CulpritOf(re); !ok || b2.Rank != 7 || !b2.Outside {
		t.Errorf("CulpritOf(RemoteError) = %+v, %v", b2, ok)
	}
	if _, ok := comm.CulpritOf(FailTimeout.Blamed(0, b, "timed out")); ok {
		t.Error("a timeout notice blames a rank")
	}
}

// Inside keeps a blame in the aborted communicator's own numbering when
// it reaches that communicator's Abort (which marks what it is given
// FromOutside): the marker nearest the blame decides, also through an
// error that wraps several.
func TestCulpritInside(t *testing.T) {
	pe := &comm.PeerError{Peer: 1, Err: errors.New("it closed its communicator")}
	for _, c := range []struct {
		name    string
		err     error
		outside bool
	}{
		{"Abort of an inside cause", FromOutside(Inside(pe)), false},
		{"an outside cause passed on inside", FromOutside(Inside(FromOutside(pe))), true},
		{"inside, aborted", &comm.AbortedError{Cause: FromOutside(Inside(&comm.OpError{Peer: 1, Err: pe}))}, false},
		{"inside, under a join", FromOutside(errors.Join(errors.New("first"), Inside(pe))), false},
		{"outside, under a join", Inside(errors.Join(FromOutside(pe))), true},
		{"unmarked under an outside join", FromOutside(errors.Join(pe)), true},
	} {
		b, ok := comm.CulpritOf(c.err)
		if !ok || b.Rank != 1 || b.Outside != c.outside {
			t.Errorf("%s: CulpritOf = %+v, %v; want rank 1, outside %v", c.name, b, ok, c.outside)
		}
	}
}
