package comm_test

import (
	"errors"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
)

// A MismatchError names both calls and the fields in which they differ.
// Communicators return it inside an *OpError; errors.Is with ErrMismatch
// and errors.As find it there.
func ExampleMismatchError() {
	local := comm.Call{Kind: comm.KindAllReduce, Send: comm.Host(make([]float32, 4)), Recv: comm.Host(make([]float32, 4)), Op: comm.Sum}
	remote := local
	remote.Send, remote.Recv = comm.Host(make([]float32, 8)), comm.Host(make([]float32, 8))
	var err error = &comm.OpError{Rank: 0, Peer: 1, Kind: comm.KindAllReduce, Seq: 3, Comm: "world",
		Err: &comm.MismatchError{Peer: 1, Seq: 3, Local: local.Signature(), Remote: remote.Signature()}}

	fmt.Println(err)
	var me *comm.MismatchError
	if errors.Is(err, comm.ErrMismatch) && errors.As(err, &me) {
		fmt.Printf("rank %d called %v\n", me.Peer, me.Remote)
	}
	// Output:
	// rank 0: AllReduce #3 on world (peer 1): mismatched collective #3: this rank called AllReduce(4×f32, sum), rank 1 called AllReduce(8×f32, sum) (the count differs); every rank must start the same collectives in the same order with the same counts, dtypes, ops and roots
	// rank 1 called AllReduce(8×f32, sum)
}
