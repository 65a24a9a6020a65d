package hierarchy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/schedule"
)

// crowded is a model in round numbers (1 µs a message, 1 byte per ns) on
// cores shared two ranks each: schedule's tests work out by hand that on
// 2 nodes of 2 its AllReduce takes the leads route up to 400 bytes and the
// 2D route from 401.
var crowded = schedule.Hierarchy{
	Intra:        schedule.CostModel{Latency: time.Microsecond, BytesPerSec: 1e9, ReduceBytesPerSec: 1e9},
	Inter:        schedule.CostModel{Latency: time.Microsecond, BytesPerSec: 1e9, ReduceBytesPerSec: 1e9},
	RanksPerCore: 2,
}

// TestRouteFollowsCost: with SmallBytes zero, the cost model picks each
// AllReduce's route, on every rank alike: 100 float32 (400 bytes) go whole
// over one rail (the rails carry AllReduces of the whole message on the
// leads only), 101 are cut in halves over both rails.
func TestRouteFollowsCost(t *testing.T) {
	const N, G = 2, 2
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hs, _, rails := countedHierarchy(ctx, t, N, G, Config{Cost: crowded})
	for _, c := range []struct {
		n     int
		route schedule.Route
	}{{100, schedule.Leads}, {101, schedule.TwoD}} {
		for _, r := range rails {
			r.mu.Lock()
			r.kinds, r.ops = map[comm.Kind]int{}, map[comm.Kind]int{}
			r.mu.Unlock()
		}
		errs := make([]error, N*G)
		var wg sync.WaitGroup
		for r := range N * G {
			wg.Go(func() {
				x := make([]float32, c.n)
				for i := range x {
					x[i] = float32(r + i)
				}
				if errs[r] = hs[r].AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); errs[r] != nil {
					return
				}
				for i, v := range x {
					if want := float32(4*i + 6); v != want {
						errs[r] = fmt.Errorf("rank %d: x[%d] = %v, want %v", r, i, v, want)
						return
					}
				}
			})
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
			got := rails[r].kinds[comm.KindAllReduce]
			want := 0 // the leads route: only local rank 0's rail
			switch {
			case c.route == schedule.TwoD:
				want = []int{(c.n - c.n/G) * 4, c.n / G * 4}[r%G] // its half (the odd element on the first)
			case r%G == 0:
				want = c.n * 4
			}
			if got != want {
				t.Errorf("%d floats (%v route): rank %d's rail carried AllReduces of %d bytes, want %d", c.n, c.route, r, got, want)
			}
		}
	}
}

// TestBuildAgreesOnCost: Build exchanges what the routes are computed
// from. Ranks that were given different RanksPerCore (each counts its own
// host) take the largest; ranks given different models fail, every one of
// them, with an error that says so, instead of running different routes
// into a hang.
func TestBuildAgreesOnCost(t *testing.T) {
	var cfgs [4]Config
	for r, f := range []float64{0.5, 3, 0, 1} {
		cfgs[r] = Config{Cost: schedule.Hierarchy{RanksPerCore: f}}
	}
	hs, errs := built2x2(t, cfgs)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if got := hs[r].cfg.Cost.RanksPerCore; got != 3 {
			t.Errorf("rank %d: RanksPerCore %g after Build, want the largest, 3", r, got)
		}
	}
	cfgs = [4]Config{}
	cfgs[2].Cost.Inter.Latency = time.Millisecond
	_, errs = built2x2(t, cfgs)
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "different Config.Cost") {
			t.Errorf("rank %d: Build = %v, want an error about different models", r, err)
		}
		// The field, with both values, on the rank given it and on the others.
		want := "Cost.Inter.Latency: 0s here, 1ms there"
		if r == 2 {
			want = "Cost.Inter.Latency: 1ms here, 0s there"
		}
		if err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: Build = %v, want it to say %q", r, err, want)
		}
	}
}
