package comm

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// The recorder keeps the last n collectives, oldest first, says how each
// ended and whom it waited on, and writes them once, at the first
// failure worth a dump.
func TestFlightRecorder(t *testing.T) {
	var out bytes.Buffer
	f := NewFlightRecorder(3, "world", 0, slog.New(slog.NewTextHandler(&out, nil)))
	sig := Signature{Kind: KindAllReduce, DType: F32, Op: Sum, Root: -1, Count: 8}
	for seq := uint64(1); seq <= 4; seq++ {
		f.begin(seq, sig)
		f.end(seq, nil)
	}
	f.begin(5, Signature{Kind: KindBarrier, Root: -1})
	recs := f.Records()
	if len(recs) != 3 || recs[0].Seq != 3 || recs[1].Seq != 4 || recs[2].Seq != 5 {
		t.Fatalf("kept %+v, want collectives 3, 4 and 5", recs)
	}
	if recs[0].State() != "ok" || recs[2].State() != "running" {
		t.Errorf("states %q, %q, want ok, running", recs[0].State(), recs[2].State())
	}
	if out.Len() != 0 {
		t.Fatalf("wrote before any failure: %s", out.String())
	}
	late := &LateError{Err: ContextError(context.DeadlineExceeded), Ranks: []int{2}, Last: []uint64{4}, Seq: 5}
	f.end(5, &OpError{Rank: 0, Peer: 2, Kind: KindBarrier, Seq: 5, Comm: "world", Err: late})
	dump := out.String()
	for _, want := range []string{"seq=3", "seq=4", "seq=5", `call=Barrier()`, "state=failed", `"waited on"=[2]`,
		`msg="flight recorder: rank behind"`, "behind=2", `"its last started"=4`, `"this rank at"=5`} {
		if !strings.Contains(dump, want) {
			t.Errorf("the dump lacks %s:\n%s", want, dump)
		}
	}
	out.Reset()
	f.begin(6, sig)
	f.end(6, &AbortedError{Cause: late})
	if out.Len() != 0 {
		t.Errorf("wrote a second dump:\n%s", out.String())
	}
}

// BenchmarkExecFlightRecorder measures what the recorder adds to a
// blocking call through an Exec whose run does nothing (the part of a
// collective's cost that is the executor's), off and on:
//
//	go test -run '^$' -bench ExecFlightRecorder -count 6 ./comm/
func BenchmarkExecFlightRecorder(b *testing.B) {
	call := Call{Kind: KindAllReduce, Send: Host(make([]float32, 2)), Recv: Host(make([]float32, 2)), Op: Sum}
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			cfg := ExecConfig[struct{}]{Run: func(*Task[struct{}]) error { return nil }}
			if on {
				cfg.Recorder = NewFlightRecorder(64, "bench", 0, nil)
			}
			e := NewExec(cfg)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := e.Do(ctx, call, nil, struct{}{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
