package nexar

import (
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// Route names the schedule runCollective picks: the cost model's choice,
// the same function (algorithm) deciding both, at sizes on either side of
// the model's switch.
func TestRouteNamesTheCostModelsChoice(t *testing.T) {
	cs := memWorld(t, 4, Options{})
	c := cs[0]
	for _, tc := range []struct {
		call comm.Call
		want string
	}{
		{comm.Call{Kind: comm.KindAllReduce, Send: comm.Host(make([]float32, 2)), Recv: comm.Host(make([]float32, 2)), Op: comm.Sum}, "doubling, 4 ranks"},
		{comm.Call{Kind: comm.KindAllReduce, Send: comm.Host(make([]float32, 1<<20)), Recv: comm.Host(make([]float32, 1<<20)), Op: comm.Sum}, "ring, 4 ranks"},
		{comm.Call{Kind: comm.KindBroadcast, Send: comm.Host(make([]byte, 8)), Recv: comm.Host(make([]byte, 8))}, "tree, 4 ranks"},
		{comm.Call{Kind: comm.KindBroadcast, Send: comm.Host(make([]byte, 8<<20)), Recv: comm.Host(make([]byte, 8<<20))}, "chain, 4 ranks"},
		{comm.Call{Kind: comm.KindReduceScatter, Send: comm.Host(make([]float32, 8)), Recv: comm.Host(make([]float32, 2)), Op: comm.Sum}, "halving, 4 ranks"},
		{comm.Call{Kind: comm.KindReduceScatter, Send: comm.Host(make([]float32, 1<<20)), Recv: comm.Host(make([]float32, 1<<18)), Op: comm.Sum}, "ring, 4 ranks"},
		{comm.Call{Kind: comm.KindAllGather, Send: comm.Host(make([]float32, 2)), Recv: comm.Host(make([]float32, 8))}, "ring, 4 ranks"},
		{comm.Call{Kind: comm.KindSend, Send: comm.Host(make([]byte, 1)), Peer: 1}, "point-to-point"},
	} {
		if got := c.Route(tc.call); got != tc.want {
			t.Errorf("Route(%v) = %q, want %q", tc.call.Signature(), got, tc.want)
		}
	}
	// The switch Route reports is the cost model's.
	m := c.opt.Cost
	for _, n := range []int{1 << 10, 1 << 16, 1 << 18, 1 << 22} {
		want := m.AllReduce(n, 4).String()
		call := comm.Call{Kind: comm.KindAllReduce, Send: comm.Host(make([]byte, n)), Recv: comm.Host(make([]byte, n)), Op: comm.Sum}
		if got := c.Route(call); !strings.HasPrefix(got, want+",") {
			t.Errorf("AllReduce of %d bytes: Route %q, the cost model %s", n, got, want)
		}
	}
}
