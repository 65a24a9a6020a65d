package comm

import (
	"errors"
	"testing"
)

// TestMismatchErrorText checks what a user reads for each kind of
// MismatchError the communicators make: never a zero Signature printed as
// if it were a call.
func TestMismatchErrorText(t *testing.T) {
	ar := Signature{Kind: KindAllReduce, DType: F32, Op: Sum, Root: -1, Count: 4}
	ar8 := ar
	ar8.Count = 8
	bc := Signature{Kind: KindBroadcast, DType: F32, Root: 2, Count: 4}
	a2av := Signature{Kind: KindAllToAllV, DType: I32, Root: -1, Count: -1}
	recv := Signature{Kind: KindRecv, DType: F32, Root: -1, Count: 4}
	send := Signature{Kind: KindSend, DType: F64, Root: -1, Count: 4}
	const rule = "; every rank must start the same collectives in the same order with the same counts, dtypes, ops and roots"
	for _, tc := range []struct {
		name string
		err  MismatchError
		want string
	}{
		{"count", MismatchError{Peer: 1, Seq: 3, Local: ar, Remote: ar8},
			"mismatched collective #3: this rank called AllReduce(4×f32, sum), rank 1 called AllReduce(8×f32, sum) (the count differs)" + rule},
		{"kind", MismatchError{Peer: 2, Seq: 7, Local: ar, Remote: bc},
			"mismatched collective #7: this rank called AllReduce(4×f32, sum), rank 2 called Broadcast(4×f32, root 2) (the kind, the op and the root differ)" + rule},
		{"remote unknown", MismatchError{Peer: 1, Seq: 3, Local: ar},
			"mismatched collective #3: this rank called AllReduce(4×f32, sum), rank 1 called something else (its call is not known here)" + rule},
		{"reported", MismatchError{Peer: 1, Seq: 3, Local: ar, Reported: "rank 2 called Barrier()"},
			"mismatched collective #3: this rank called AllReduce(4×f32, sum); rank 1 reported: rank 2 called Barrier()"},
		{"reported, local unknown", MismatchError{Peer: 1, Seq: 3, Reported: "rank 2 called Barrier()"},
			"mismatched collective #3: rank 1 reported: rank 2 called Barrier()"},
		{"local unknown", MismatchError{Peer: 1, Seq: 3, Remote: bc},
			"mismatched collective #3: rank 1 called Broadcast(4×f32, root 2)" + rule},
		{"both unknown", MismatchError{Peer: 1, Seq: 3},
			"mismatched collective #3: rank 1 disagreed (neither call is known here)" + rule},
		{"same signature", MismatchError{Peer: 0, Seq: 2, Local: a2av, Remote: a2av},
			"mismatched collective #2: this rank called AllToAllV(i32), and so did rank 0, but with arguments that disagree with this rank's beyond what a signature shows (such as AllToAllV's counts)" + rule},
		{"point-to-point", MismatchError{Peer: 1, Local: recv, Remote: send},
			"mismatched message: this rank called Recv(4×f32), rank 1 called Send(4×f64) (the dtype differs); a Recv's buffer must have the dtype and length of the Send's"},
	} {
		got := tc.err.Error()
		if got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
		if !errors.Is(&tc.err, ErrMismatch) {
			t.Errorf("%s: not ErrMismatch", tc.name)
		}
	}
}

func TestSignatureString(t *testing.T) {
	for _, tc := range []struct {
		s    Signature
		want string
	}{
		{Signature{}, "an unknown call"},
		{Signature{Kind: KindBarrier, Root: -1}, "Barrier()"},
		{Signature{Kind: KindReduce, DType: BF16, Op: Max, Root: 0, Count: 0}, "Reduce(0×bf16, max, root 0)"},
		{Signature{Kind: KindAllToAllV, DType: U8, Root: -1, Count: -1}, "AllToAllV(u8)"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("%#v: got %q, want %q", tc.s, got, tc.want)
		}
	}
}

// TestCulpritComesFirst checks what a user reads for a peer's failure,
// seen or heard, and what OpError.Culprit gives a program: the failed
// rank first, where this rank met it after, in one line.
func TestCulpritComesFirst(t *testing.T) {
	killed := errors.New("killed")
	heard := FailPeer.Blamed(1, Blame{Rank: 3, How: "killed"}, "killed")
	for _, tc := range []struct {
		name    string
		err     *OpError
		culprit int // -1: none
		want    string
		is      []error
	}{
		{"seen", &OpError{Rank: 0, Peer: 3, Kind: KindAllReduce, Seq: 41, Comm: "world", Err: &PeerError{Peer: 3, Addr: "10.0.0.7:4000", Err: killed}}, 3,
			"rank 3 (10.0.0.7:4000) failed: killed; check that process's log — rank 0: AllReduce #41 on world (peer 3)",
			[]error{ErrPeerFailed, killed}},
		{"heard", &OpError{Rank: 2, Peer: 1, Kind: KindBarrier, Seq: 7, Comm: "world", Err: heard}, 3,
			"rank 3 failed: killed (told by rank 1) — rank 2: Barrier #7 on world (peer 1)",
			[]error{ErrPeerFailed, ErrPeerAbandoned}},
		{"aborted earlier", &OpError{Rank: 2, Peer: -1, Kind: KindBarrier, Seq: 8, Comm: "world", Err: &AbortedError{Cause: &OpError{Rank: 2, Peer: 1, Kind: KindBarrier, Seq: 7, Comm: "world", Err: heard}}}, 3,
			"rank 3 failed: killed (told by rank 1) — rank 2: Barrier #8 on world, the communicator aborted by it earlier",
			[]error{ErrPeerFailed, ErrPeerAbandoned, ErrAborted}},
		{"through a part", &OpError{Rank: 0, Peer: 6, Kind: KindAllReduce, Seq: 1, Comm: "hierarchy",
			Err: &PeerError{Peer: 6, Addr: "node 1, local 2", Err: &ViaError{How: "it closed its communicator", Via: "through rail 0, from rank 4", Err: heard}}}, 6,
			"rank 6 (node 1, local 2) failed: it closed its communicator (through rail 0, from rank 4); check that process's log — rank 0: AllReduce #1 on hierarchy (peer 6)",
			[]error{ErrPeerFailed, ErrPeerAbandoned}},
		{"no culprit", &OpError{Rank: 1, Peer: 2, Kind: KindAllReduce, Seq: 3, Comm: "world", Err: FailTimeout.Remote(2, "timed out")}, -1,
			"rank 1: AllReduce #3 on world (peer 2): rank 2 ended the collective on its side: timed out",
			[]error{ErrTimeout, ErrPeerAbandoned}},
		{"a failure that names no rank", &OpError{Rank: 1, Peer: 2, Kind: KindAllReduce, Seq: 3, Comm: "world", Err: FailPeer.Remote(2, "some rank failed")}, -1,
			"rank 1: AllReduce #3 on world (peer 2): rank 2 ended the collective on its side: some rank failed",
			[]error{ErrPeerFailed, ErrPeerAbandoned}},
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
	pe := &PeerError{Peer: 7, Addr: "node 1, local 3", Err: &ViaError{How: "its process (pid 42) is gone", Via: "through node 1 shm"}}
	b, ok := CulpritOf(&AbortedError{Cause: FromOutside(&OpError{Rank: 2, Peer: 7, Kind: KindAllReduce, Err: pe})})
	if !ok || b.Rank != 7 || !b.Outside || b.How != "its process (pid 42) is gone" {
		t.Errorf("CulpritOf(FromOutside(…)) = %+v, %v; want rank 7 outside, what happened without the path", b, ok)
	}
	if b, ok := CulpritOf(pe); !ok || b.Outside {
		t.Errorf("CulpritOf of a part's own PeerError = %+v, %v; want it not outside", b, ok)
	}
	re := FailPeer.Blamed(0, b, b.How)
	re.CulpritOutside = true
	if b2, ok := CulpritOf(re); !ok || b2.Rank != 7 || !b2.Outside {
		t.Errorf("CulpritOf(RemoteError) = %+v, %v", b2, ok)
	}
	if _, ok := CulpritOf(FailTimeout.Blamed(0, b, "timed out")); ok {
		t.Error("a timeout notice blames a rank")
	}
}

// Inside keeps a blame in the aborted communicator's own numbering when
// it reaches that communicator's Abort (which marks what it is given
// FromOutside): the marker nearest the blame decides, also through an
// error that wraps several.
func TestCulpritInside(t *testing.T) {
	pe := &PeerError{Peer: 1, Err: errors.New("it closed its communicator")}
	for _, c := range []struct {
		name    string
		err     error
		outside bool
	}{
		{"Abort of an inside cause", FromOutside(Inside(pe)), false},
		{"an outside cause passed on inside", FromOutside(Inside(FromOutside(pe))), true},
		{"inside, aborted", &AbortedError{Cause: FromOutside(Inside(&OpError{Peer: 1, Err: pe}))}, false},
		{"inside, under a join", FromOutside(errors.Join(errors.New("first"), Inside(pe))), false},
		{"outside, under a join", Inside(errors.Join(FromOutside(pe))), true},
		{"unmarked under an outside join", FromOutside(errors.Join(pe)), true},
	} {
		b, ok := CulpritOf(c.err)
		if !ok || b.Rank != 1 || b.Outside != c.outside {
			t.Errorf("%s: CulpritOf = %+v, %v; want rank 1, outside %v", c.name, b, ok, c.outside)
		}
	}
}
