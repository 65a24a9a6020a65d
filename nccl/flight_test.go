package nccl_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/internal/procgroup"
	"github.com/hiercomm/hiercomm/nccl"
)

// With Config.FlightRecorder a collective's record ends when its event
// completed, says where it was (queued on the stream), and a deadline
// while rank 2 never comes writes the dump with the stage it stopped in.
func TestFlightRecorderFollowsTheStream(t *testing.T) {
	var out procgroup.Buffer
	comms, dev := fakeWorldWith(t, 3, nccl.Config{FlightRecorder: 4, Logger: slog.New(slog.NewTextHandler(&out, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs, _ := allReduceOn(t, comms, dev, -1, ctx, 1000)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel2()
	errs, _ = allReduceOn(t, comms, dev, 2, short, 1000)
	for r := range 2 {
		if !errors.Is(errs[r], comm.ErrTimeout) {
			t.Fatalf("rank %d: %v, want comm.ErrTimeout", r, errs[r])
		}
	}
	dump := out.String()
	for _, want := range []string{"flight recorder: the last collectives", "seq=1", "state=ok", `detail="queued on stream 0x`,
		"seq=2", "state=failed", `detail="comparing the call with every rank over the control"`} {
		if !strings.Contains(dump, want) {
			t.Errorf("the dump lacks %s:\n%s", want, dump)
		}
	}
}
