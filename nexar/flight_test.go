package nexar

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// With Options.FlightRecorder, a deadline on a rank writes its last
// collectives and the rank it was left waiting on (the one that never
// came), once; without it, nothing is written.
func TestFlightRecorderDumpsOnTimeout(t *testing.T) {
	for _, n := range []int{0, 8} {
		var logs syncWriter
		log := slog.New(slog.NewTextHandler(&logs, nil))
		cs := memWorld(t, 3, Options{Timeout: 500 * time.Millisecond, ProbeAfter: 50 * time.Millisecond, FlightRecorder: n, Logger: log})
		for range 3 {
			onEveryRank(cs, func(r int, c *Comm) error {
				x := []float32{1}
				return c.AllReduce(context.Background(), comm.Host(x), comm.Host(x), comm.Sum)
			})
		}
		onEveryRank(cs, func(r int, c *Comm) error {
			if r == 1 {
				return nil // never comes
			}
			return c.Barrier(context.Background())
		})
		dump := logs.String()
		if n == 0 {
			if strings.Contains(dump, "flight recorder") {
				t.Errorf("FlightRecorder 0 wrote:\n%s", dump)
			}
			continue
		}
		for _, want := range []string{`call="AllReduce(1×f32, sum)"`, "state=ok", "call=Barrier()", "state=failed",
			`msg="flight recorder: rank behind" comm=world rank=0 behind=1 "its last started"=3 "this rank at"=4`} {
			if !strings.Contains(dump, want) {
				t.Errorf("the dump lacks %s:\n%s", want, dump)
			}
		}
		if c := strings.Count(dump, `msg="flight recorder: the last collectives" comm=world rank=0`); c != 1 {
			t.Errorf("rank 0 wrote %d dumps, want 1:\n%s", c, dump)
		}
	}
}

// A split is named by its world rank first, then its own (rank=2
// local=1), in its dump and its log lines, and SetName renames it in both
// and names its later children after it.
func TestSplitIsNamedByItsWorldRank(t *testing.T) {
	var logs syncWriter
	log := slog.New(slog.NewTextHandler(&logs, nil))
	cs := memWorld(t, 4, Options{Timeout: 30 * time.Second, FlightRecorder: 4, Logger: log})
	rails := make([]comm.Communicator, 4)
	if err := errors.Join(onEveryRank(cs, func(r int, c *Comm) error {
		var err error
		rails[r], err = c.Split(context.Background(), r%2, r)
		return err
	})...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range rails {
			c.Close()
		}
	})
	for _, r := range []int{0, 2} {
		rails[r].(*Comm).SetName("rail 0")
	}
	rail := rails[2].(*Comm)
	tier.DumpLive("split names test")
	rail.deliver(1, transport.Header{Kind: transport.FrameData}, nil) // world rank 1 is on the other rail
	for _, want := range []string{
		`msg="flight recorder: the last collectives" comm="rail 0" rank=2 local=1`,
		`msg="flight recorder: the last collectives" comm=world rank=2 kept=1`,
		`msg="nexar: dropped a frame from a rank outside the communicator" comm="rail 0" rank=2 local=1 src=1`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the logs lack %s:\n%s", want, logs.String())
		}
	}
	var child comm.Communicator
	if err := errors.Join(onEveryRank(cs, func(r int, c *Comm) error {
		if r%2 != 0 {
			return nil
		}
		kid, err := rails[r].Split(context.Background(), 0, r)
		if err != nil {
			return err
		}
		t.Cleanup(func() { kid.Close() })
		if r == 2 {
			child = kid
		}
		return nil
	})...); err != nil {
		t.Fatal(err)
	}
	if got := child.(*Comm).Name(); !strings.HasPrefix(got, "rail 0/split#") {
		t.Errorf("the renamed rail's child is %q", got)
	}
}

// BenchmarkFlightRecorder measures a small AllReduce on an in-memory
// world of 4 with the recorder off (the default) and on:
//
//	go test -run '^$' -bench FlightRecorder -count 6 ./nexar/
func BenchmarkFlightRecorder(b *testing.B) {
	for _, n := range []int{0, 64} {
		b.Run(map[int]string{0: "off", 64: "on"}[n], func(b *testing.B) {
			cs, err := NewMemoryWorld(4, Options{FlightRecorder: n})
			if err != nil {
				b.Fatal(err)
			}
			defer CloseAll(cs)
			b.ResetTimer()
			onEveryRank(cs, func(r int, c *Comm) error {
				x := []float32{1, 2}
				for range b.N {
					if err := c.AllReduce(context.Background(), comm.Host(x), comm.Host(x), comm.Sum); err != nil {
						b.Error(err)
						return err
					}
				}
				return nil
			})
		})
	}
}
