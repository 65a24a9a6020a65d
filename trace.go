package hiercomm

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// The per-call trace: with the log at LevelTrace (HIERCOMM_DEBUG=TRACE),
// every call made through the World writes one line when it ends, as
// NCCL_DEBUG_SUBSYS=COLL does for NCCL's:
//
//	2026/11/28 20:21:21 TRACE hiercomm: call n=2 call="AllReduce(65536×f32, sum)" route="2d: node 0 shm ReduceScatter (staged step by step, 2 ranks); rail 0 AllReduce (doubling, 2 ranks); node 0 shm AllGather (staged step by step, 2 ranks)" took=6.84ms
//
// n counts the World's calls on this rank; call is what was asked (the
// arguments ranks must agree on); route how the World's communicator runs
// it, where it says (a Route method: nexar's schedule, shared memory's
// way, NCCL's calls, the hierarchy's route and the operations it issues
// on its parts, each with that part's route); took the time from the call
// to its end (a started call's: to its completion); err its error, if
// any. Whether to trace is decided once, when the World is made: at any
// other level a call costs one branch.

// router is a communicator that says how it runs a call.
type router interface{ Route(comm.Call) string }

// call runs f, the World's call c, on its communicator: its error goes to
// report, and it is traced when the World traces.
func (w *World) call(ctx context.Context, c comm.Call, f func() error) error {
	if !w.tracing {
		return w.report(f())
	}
	done := w.tracer(ctx, c)
	return w.report(done(f()))
}

// tracer starts the trace of call c: the function it returns, given the
// call's outcome, writes its line and returns the outcome.
func (w *World) tracer(ctx context.Context, c comm.Call) func(error) error {
	n := w.traced.Add(1)
	route := ""
	if r, ok := w.Communicator.(router); ok {
		route = r.Route(c)
	}
	start := time.Now()
	return func(err error) error {
		attrs := []slog.Attr{slog.Uint64("n", n), slog.String("call", callName(c))}
		if route != "" {
			attrs = append(attrs, slog.String("route", route))
		}
		attrs = append(attrs, slog.Duration("took", time.Since(start).Round(time.Microsecond)))
		if err != nil {
			attrs = append(attrs, slog.String("err", err.Error()))
		}
		w.log.LogAttrs(ctx, LevelTrace, "hiercomm: call", attrs...)
		return err
	}
}

// callName is c as the trace names it: its Signature's words, and for
// Send and Recv the peer and tag.
func callName(c comm.Call) string {
	switch c.Kind {
	case comm.KindSend, comm.KindRecv:
		b := c.Send
		if c.Kind == comm.KindRecv {
			b = c.Recv
		}
		return fmt.Sprintf("%v(%d×%v, peer %d, tag %d)", c.Kind, b.Len(), b.DType(), c.Peer, c.Tag)
	}
	return c.Signature().String()
}

// tracing is whether a World made with log traces its calls.
func tracing(log *slog.Logger) bool { return log.Enabled(context.Background(), LevelTrace) }
