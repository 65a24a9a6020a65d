package hiercomm

import (
	"context"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/internal/procgroup"
)

// SIGUSR1 to a process that called Init writes every live communicator's
// flight recorder: here a real signal to this test process, after the
// handler Init installs.
func TestSIGUSR1WritesTheLiveRecorders(t *testing.T) {
	var out procgroup.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	dumpOnSIGUSR1(log)
	e := tier.NewExec(tier.ExecConfig[struct{}]{
		Recorder: tier.NewFlightRecorder(4, "usr1-test-comm", 3, log),
		Run:      func(*tier.Task[struct{}]) error { return nil },
	})
	defer e.Close()
	if err := e.Do(context.Background(), comm.Call{Kind: comm.KindBarrier}, nil, struct{}{}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), `msg="flight recorder: collective" comm=usr1-test-comm rank=3 seq=1 call=Barrier() state=ok`) {
		if time.Now().After(deadline) {
			t.Fatalf("no dump after SIGUSR1:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "cause=SIGUSR1") {
		t.Errorf("the dump does not say why:\n%s", out.String())
	}
}

// HIERCOMM_FLIGHT_RECORDER switches every tier's recorder on when
// Options.FlightRecorder is zero; a bad value is an error naming it.
func TestFlightRecorderFromTheEnvironmentFillsEveryTier(t *testing.T) {
	for in, want := range map[string]int{"": 0, "0": 0, " 64 ": 64} {
		if n, err := envFlightRecorder(func(string) string { return in }); n != want || err != nil {
			t.Errorf("%q: %d, %v; want %d", in, n, err, want)
		}
	}
	for _, in := range []string{"-1", "lots", "1.5"} {
		if _, err := envFlightRecorder(func(string) string { return in }); err == nil || !strings.Contains(err.Error(), EnvFlightRecorder+"="+in) {
			t.Errorf("%q: %v, want an error naming the value", in, err)
		}
	}
	opt := Options{FlightRecorder: 32}
	opt.Shm.FlightRecorder = 4
	got := opt.withDefaults(slog.Default())
	if got.Nexar.FlightRecorder != 32 || got.Shm.FlightRecorder != 4 || got.Hierarchy.FlightRecorder != 32 || got.NCCL.FlightRecorder != 32 {
		t.Errorf("the tiers got %d, %d, %d, %d; want 32, 4 (its own), 32, 32",
			got.Nexar.FlightRecorder, got.Shm.FlightRecorder, got.Hierarchy.FlightRecorder, got.NCCL.FlightRecorder)
	}
}
