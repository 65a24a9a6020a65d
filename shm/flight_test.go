package shm

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/internal/procgroup"
)

// With Config.FlightRecorder, a rank whose Barrier times out while local
// rank 1 never comes writes its last collectives, the node-mates the
// Barrier waited on, and rank 1 as behind.
func TestFlightRecorderNamesTheNodeMatesWaitedOn(t *testing.T) {
	var out procgroup.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	cs := localWorld(t, 3, Config{SlotBytes: minSlotBytes, FlightRecorder: 4, Logger: log})
	errs := onEveryRank(cs, func(r int, c *Comm) error {
		if err := c.Barrier(context.Background()); err != nil {
			return err
		}
		if r == 1 {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if err := c.Barrier(ctx); !errors.Is(err, comm.ErrTimeout) {
			return err
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	dump := out.String()
	for _, want := range []string{"flight recorder: the last collectives", "seq=1", "state=ok", "seq=2", "state=failed",
		`detail="step 2: waited on node-mates (local ranks) [1]"`, `msg="flight recorder: rank behind"`, "behind=1"} {
		if !strings.Contains(dump, want) {
			t.Errorf("the dump lacks %s:\n%s", want, dump)
		}
	}
}
