package tier

import (
	"context"
	"reflect"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// recorder is a Starter that keeps the Calls it is given and completes
// each at once.
type recorder struct{ calls []comm.Call }

func (r *recorder) Start(_ context.Context, c comm.Call) *comm.Work {
	r.calls = append(r.calls, c)
	return comm.Failed(nil)
}

// TestStartFormsMatchBlocking checks that each Start form starts exactly
// the Call the blocking method of the same name makes, so that the two
// forms can be mixed on one communicator.
func TestStartFormsMatchBlocking(t *testing.T) {
	ctx := context.Background()
	a, b := comm.Host([]float32{1, 2}), comm.Host([]float32{3, 4, 5, 6})
	sc, rc := []int{1, 1}, []int{2, 0}
	forms := []struct {
		name     string
		start    func(comm.Starter) *comm.Work
		blocking func(Blocking) error
	}{
		{"AllReduce", func(s comm.Starter) *comm.Work { return comm.StartAllReduce(ctx, s, a, b, comm.Max) },
			func(x Blocking) error { return x.AllReduce(ctx, a, b, comm.Max) }},
		{"Broadcast", func(s comm.Starter) *comm.Work { return comm.StartBroadcast(ctx, s, a, 1) },
			func(x Blocking) error { return x.Broadcast(ctx, a, 1) }},
		{"Reduce", func(s comm.Starter) *comm.Work { return comm.StartReduce(ctx, s, a, b, comm.Prod, 2) },
			func(x Blocking) error { return x.Reduce(ctx, a, b, comm.Prod, 2) }},
		{"AllGather", func(s comm.Starter) *comm.Work { return comm.StartAllGather(ctx, s, a, b) },
			func(x Blocking) error { return x.AllGather(ctx, a, b) }},
		{"ReduceScatter", func(s comm.Starter) *comm.Work { return comm.StartReduceScatter(ctx, s, b, a, comm.Min) },
			func(x Blocking) error { return x.ReduceScatter(ctx, b, a, comm.Min) }},
		{"AllToAll", func(s comm.Starter) *comm.Work { return comm.StartAllToAll(ctx, s, b, a) },
			func(x Blocking) error { return x.AllToAll(ctx, b, a) }},
		{"AllToAllV", func(s comm.Starter) *comm.Work { return comm.StartAllToAllV(ctx, s, a, sc, b, rc) },
			func(x Blocking) error { return x.AllToAllV(ctx, a, sc, b, rc) }},
		{"Gather", func(s comm.Starter) *comm.Work { return comm.StartGather(ctx, s, a, b, 1) },
			func(x Blocking) error { return x.Gather(ctx, a, b, 1) }},
		{"Scatter", func(s comm.Starter) *comm.Work { return comm.StartScatter(ctx, s, b, a, 1) },
			func(x Blocking) error { return x.Scatter(ctx, b, a, 1) }},
		{"Scan", func(s comm.Starter) *comm.Work { return comm.StartScan(ctx, s, a, b, comm.Sum) },
			func(x Blocking) error { return x.Scan(ctx, a, b, comm.Sum) }},
		{"ExScan", func(s comm.Starter) *comm.Work { return comm.StartExScan(ctx, s, a, b, comm.Avg) },
			func(x Blocking) error { return x.ExScan(ctx, a, b, comm.Avg) }},
		{"Send", func(s comm.Starter) *comm.Work { return comm.StartSend(ctx, s, a, 3, 7) },
			func(x Blocking) error { return x.Send(ctx, a, 3, 7) }},
		{"Recv", func(s comm.Starter) *comm.Work { return comm.StartRecv(ctx, s, b, 3, 7) },
			func(x Blocking) error { return x.Recv(ctx, b, 3, 7) }},
		{"Barrier", func(s comm.Starter) *comm.Work { return comm.StartBarrier(ctx, s) },
			func(x Blocking) error { return x.Barrier(ctx) }},
	}
	for _, f := range forms {
		var started, blocked recorder
		if err := f.start(&started).Wait(); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if err := f.blocking(Blocking{S: &blocked}); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if len(started.calls) != 1 || len(blocked.calls) != 1 {
			t.Fatalf("%s: the Start form started %d calls, the blocking form %d; want 1 each", f.name, len(started.calls), len(blocked.calls))
		}
		got, want := started.calls[0], blocked.calls[0]
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Start form's call %+v, blocking form's %+v", f.name, got, want)
		}
		if got.Kind.String() != f.name {
			t.Errorf("%s: started a %v", f.name, got.Kind)
		}
	}
}
