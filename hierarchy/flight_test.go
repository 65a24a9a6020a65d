package hierarchy_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/internal/procgroup"
)

// With Config.FlightRecorder the hierarchy records the user's calls, each
// with the part and phase it was in last, and a live dump
// (tier.DumpLive, hiercomm's SIGUSR1) writes them for every rank.
func TestFlightRecorderRecordsTheUsersCallAndItsPhase(t *testing.T) {
	var out procgroup.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&out, nil))) // build gives the ranks no logger of their own
	defer slog.SetDefault(old)
	cs := build(t, layout{name: "2x2", perNode: []int{2, 2}}, "nexar", hierarchy.Config{FlightRecorder: 8})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := each(cs, func(r int, c comm.Communicator) error {
		x := make([]float32, 1000)
		return c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum)
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	tier.DumpLive("a test asked")
	for _, c := range cs {
		c.Close()
	}
	dump := out.String()
	for r := range 4 {
		found := false
		for _, line := range strings.Split(dump, "\n") {
			if strings.Contains(line, "comm=hierarchy") && strings.Contains(line, fmt.Sprintf("rank=%d ", r)) &&
				strings.Contains(line, `call="AllReduce(1000×f32, sum)"`) && strings.Contains(line, "state=ok") &&
				(strings.Contains(line, `detail="node `) || strings.Contains(line, `detail="rail `)) {
				found = true
			}
		}
		if !found {
			t.Errorf("rank %d: no record of the AllReduce with its phase:\n%s", r, dump)
		}
	}
}
