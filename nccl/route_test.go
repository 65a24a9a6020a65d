package nccl_test

import (
	"testing"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nccl"
)

// Route names the NCCL calls launch makes: the collective's own (with a
// PreMulSum op where it needs one), and the host combination where NCCL
// has no op that computes as comm does (its float min and max drop NaNs;
// it has no i16, no xor, no bitwise ops); a
// Staged communicator adds its staging to its host communicator's route.
func TestRouteNamesTheNCCLCalls(t *testing.T) {
	cs, dev := fakeWorld(t, 2)
	c := cs[0].(*nccl.Comm)
	f, err := dev.Alloc(comm.F32, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Free(f)
	i16, i32 := comm.Device(f.Ptr(), 32, comm.I16, 0), comm.Device(f.Ptr(), 16, comm.I32, 0)
	b, f8 := comm.Device(f.Ptr(), 64, comm.Bool, 0), comm.Device(f.Ptr(), 64, comm.F8E4M3, 0)
	for _, tc := range []struct {
		call comm.Call
		want string
	}{
		{comm.Call{Kind: comm.KindAllReduce, Send: f, Recv: f, Op: comm.Sum}, "ncclAllReduce, 2 ranks"},
		{comm.Call{Kind: comm.KindAllReduce, Send: f, Recv: f, Op: comm.Max}, "gathered on the GPU and combined on the host (NCCL's float min and max drop NaNs), 2 ranks"},
		{comm.Call{Kind: comm.KindAllToAll, Send: f, Recv: f}, "ncclSend and ncclRecv in one group, 2 ranks"},
		{comm.Call{Kind: comm.KindAllReduce, Send: f, Recv: f, Op: comm.PreMulSum, Scalar: 2}, "ncclAllReduce with an op of ncclRedOpCreatePreMulSum, 2 ranks"},
		{comm.Call{Kind: comm.KindAllReduce, Send: i16, Recv: i16, Op: comm.Sum}, "gathered on the GPU and combined on the host (NCCL has no i16 type), 2 ranks"},
		{comm.Call{Kind: comm.KindAllReduce, Send: b, Recv: b, Op: comm.Sum}, "ncclAllReduce, 2 ranks"},
		{comm.Call{Kind: comm.KindAllReduce, Send: b, Recv: b, Op: comm.BXor}, "gathered on the GPU and combined on the host (NCCL has no xor), 2 ranks"},
		{comm.Call{Kind: comm.KindReduceScatter, Send: i32, Recv: i32.Slice(0, 8), Op: comm.BAnd}, "gathered on the GPU and combined on the host (NCCL has no bitwise ops), 2 ranks"},
		{comm.Call{Kind: comm.KindAllReduce, Send: f8, Recv: f8, Op: comm.Sum}, "ncclAllReduce, 2 ranks"},
	} {
		if got := c.Route(tc.call); got != tc.want {
			t.Errorf("Route(%v) = %q, want %q", tc.call.Signature(), got, tc.want)
		}
	}
}
