package tier

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// The recorder keeps the last n collectives, oldest first, says how each
// ended and whom it waited on, and writes them once, at the first
// failure worth a dump.
func TestFlightRecorder(t *testing.T) {
	var out bytes.Buffer
	f := NewFlightRecorder(3, "world", 0, slog.New(slog.NewTextHandler(&out, nil)))
	sig := comm.Signature{Kind: comm.KindAllReduce, DType: comm.F32, Op: comm.Sum, Root: -1, Count: 8}
	for seq := uint64(1); seq <= 4; seq++ {
		f.begin(seq, sig)
		f.end(seq, nil)
	}
	f.begin(5, comm.Signature{Kind: comm.KindBarrier, Root: -1})
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
	late := &comm.LateError{Err: ContextError(context.DeadlineExceeded), Ranks: []int{2}, Last: []uint64{4}, Seq: 5}
	f.end(5, &comm.OpError{Rank: 0, Peer: 2, Kind: comm.KindBarrier, Seq: 5, Comm: "world", Err: late})
	dump := out.String()
	for _, want := range []string{"seq=3", "seq=4", "seq=5", `call=Barrier()`, "state=failed", `"waited on"=[2]`,
		`msg="flight recorder: rank behind"`, "behind=2", `"its last started"=4`, `"this rank at"=5`} {
		if !strings.Contains(dump, want) {
			t.Errorf("the dump lacks %s:\n%s", want, dump)
		}
	}
	out.Reset()
	f.begin(6, sig)
	f.end(6, &comm.AbortedError{Cause: late})
	if out.Len() != 0 {
		t.Errorf("wrote a second dump:\n%s", out.String())
	}
}

// A recorder is live from its making until its Exec closes: DumpLive
// writes every live one, with the tier's note of where each collective
// is, and none after Close.
func TestDumpLiveWritesEveryLiveRecorder(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	f := NewFlightRecorder(4, "test-live-comm", 2, log)
	e := NewExec(ExecConfig[struct{}]{Recorder: f, Run: func(t *Task[struct{}]) error {
		f.Note(t.Seq, "phase 2 of 3: rail 1 AllReduce", nil)
		return nil
	}})
	call := comm.Call{Kind: comm.KindBarrier}
	if err := e.Do(context.Background(), call, nil, struct{}{}); err != nil {
		t.Fatal(err)
	}
	(*FlightRecorder)(nil).Note(1, "a nil recorder takes notes and does nothing", []int{1})
	if n := DumpLive("SIGUSR1"); n < 1 {
		t.Fatalf("DumpLive wrote %d recorders, want at least this one", n)
	}
	dump := out.String()
	for _, want := range []string{"comm=test-live-comm", "rank=2", "cause=SIGUSR1", "seq=1", "state=ok", `detail="phase 2 of 3: rail 1 AllReduce"`} {
		if !strings.Contains(dump, want) {
			t.Errorf("the live dump lacks %s:\n%s", want, dump)
		}
	}
	e.Close()
	out.Reset()
	DumpLive("SIGUSR1")
	if strings.Contains(out.String(), "test-live-comm") {
		t.Errorf("a closed communicator's recorder is still live:\n%s", out.String())
	}
}

// A part of a composed communicator is named by its role, and its dump
// names this process by its job rank first, then its rank in the part.
func TestFlightRecorderIdentify(t *testing.T) {
	var out bytes.Buffer
	f := NewFlightRecorder(2, "world", 1, slog.New(slog.NewTextHandler(&out, nil)))
	f.Identify("node 1 shm", 3)
	f.begin(1, comm.Signature{Kind: comm.KindBarrier, Root: -1})
	f.end(1, &comm.OpError{Rank: 1, Peer: 0, Kind: comm.KindBarrier, Seq: 1, Comm: "node 1 shm", Err: &comm.PeerError{Peer: 0, Err: comm.ErrTimeout}})
	dump := out.String()
	for _, want := range []string{
		`msg="flight recorder: the last collectives" comm="node 1 shm" rank=3 local=1 kept=1`,
		`msg="flight recorder: collective" comm="node 1 shm" rank=3 local=1 seq=1`,
		`msg="flight recorder: rank behind" comm="node 1 shm" rank=3 local=1 behind=0`,
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("the dump lacks %s:\n%s", want, dump)
		}
	}
	if strings.Contains(dump, "comm=world") {
		t.Errorf("the dump still names the part by its own name:\n%s", dump)
	}
}

// BenchmarkExecFlightRecorder measures what the recorder adds to a
// blocking call through an Exec whose run does nothing (the part of a
// collective's cost that is the executor's), off and on:
//
//	go test -run '^$' -bench ExecFlightRecorder -count 6 ./comm/
func BenchmarkExecFlightRecorder(b *testing.B) {
	call := comm.Call{Kind: comm.KindAllReduce, Send: comm.Host(make([]float32, 2)), Recv: comm.Host(make([]float32, 2)), Op: comm.Sum}
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
