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
