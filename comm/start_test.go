package comm

import (
	"context"
	"reflect"
	"testing"
)

// recorder is a Starter that keeps the Calls it is given and completes
// each at once.
type recorder struct{ calls []Call }

func (r *recorder) Start(_ context.Context, c Call) *Work {
	r.calls = append(r.calls, c)
	return Failed(nil)
}

// TestStartFormsMatchBlocking checks that each Start form starts exactly
// the Call the blocking method of the same name makes, so that the two
// forms can be mixed on one communicator.
func TestStartFormsMatchBlocking(t *testing.T) {
	ctx := context.Background()
	a, b := Host([]float32{1, 2}), Host([]float32{3, 4, 5, 6})
	sc, rc := []int{1, 1}, []int{2, 0}
	forms := []struct {
		name     string
		start    func(Starter) *Work
		blocking func(Blocking) error
	}{
		{"AllReduce", func(s Starter) *Work { return StartAllReduce(ctx, s, a, b, Max) },
			func(x Blocking) error { return x.AllReduce(ctx, a, b, Max) }},
		{"Broadcast", func(s Starter) *Work { return StartBroadcast(ctx, s, a, 1) },
			func(x Blocking) error { return x.Broadcast(ctx, a, 1) }},
		{"Reduce", func(s Starter) *Work { return StartReduce(ctx, s, a, b, Prod, 2) },
			func(x Blocking) error { return x.Reduce(ctx, a, b, Prod, 2) }},
		{"AllGather", func(s Starter) *Work { return StartAllGather(ctx, s, a, b) },
			func(x Blocking) error { return x.AllGather(ctx, a, b) }},
		{"ReduceScatter", func(s Starter) *Work { return StartReduceScatter(ctx, s, b, a, Min) },
			func(x Blocking) error { return x.ReduceScatter(ctx, b, a, Min) }},
		{"AllToAll", func(s Starter) *Work { return StartAllToAll(ctx, s, b, a) },
			func(x Blocking) error { return x.AllToAll(ctx, b, a) }},
		{"AllToAllV", func(s Starter) *Work { return StartAllToAllV(ctx, s, a, sc, b, rc) },
			func(x Blocking) error { return x.AllToAllV(ctx, a, sc, b, rc) }},
		{"Gather", func(s Starter) *Work { return StartGather(ctx, s, a, b, 1) },
			func(x Blocking) error { return x.Gather(ctx, a, b, 1) }},
		{"Scatter", func(s Starter) *Work { return StartScatter(ctx, s, b, a, 1) },
			func(x Blocking) error { return x.Scatter(ctx, b, a, 1) }},
		{"Scan", func(s Starter) *Work { return StartScan(ctx, s, a, b, Sum) },
			func(x Blocking) error { return x.Scan(ctx, a, b, Sum) }},
		{"ExScan", func(s Starter) *Work { return StartExScan(ctx, s, a, b, Avg) },
			func(x Blocking) error { return x.ExScan(ctx, a, b, Avg) }},
		{"Send", func(s Starter) *Work { return StartSend(ctx, s, a, 3, 7) },
			func(x Blocking) error { return x.Send(ctx, a, 3, 7) }},
		{"Recv", func(s Starter) *Work { return StartRecv(ctx, s, b, 3, 7) },
			func(x Blocking) error { return x.Recv(ctx, b, 3, 7) }},
		{"Barrier", func(s Starter) *Work { return StartBarrier(ctx, s) },
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
