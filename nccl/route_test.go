package nccl_test

import (
	"testing"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nccl"
)

// Route names the NCCL calls launch makes: the collective's own, and the
// host combination where NCCL's float min and max would drop NaNs; a
// Staged communicator adds its staging to its host communicator's route.
func TestRouteNamesTheNCCLCalls(t *testing.T) {
	cs, dev := fakeWorld(t, 2)
	c := cs[0].(*nccl.Comm)
	f, err := dev.Alloc(comm.F32, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Free(f)
	for _, tc := range []struct {
		call comm.Call
		want string
	}{
		{comm.Call{Kind: comm.KindAllReduce, Send: f, Recv: f, Op: comm.Sum}, "ncclAllReduce, 2 ranks"},
		{comm.Call{Kind: comm.KindAllReduce, Send: f, Recv: f, Op: comm.Max}, "gathered on the GPU and combined on the host (NCCL's float min and max drop NaNs), 2 ranks"},
		{comm.Call{Kind: comm.KindAllToAll, Send: f, Recv: f}, "ncclSend and ncclRecv in one group, 2 ranks"},
	} {
		if got := c.Route(tc.call); got != tc.want {
			t.Errorf("Route(%v) = %q, want %q", tc.call.Signature(), got, tc.want)
		}
	}
}
