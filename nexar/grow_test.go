package nexar_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/nexar"
)

// growKey is the job key of the grown worlds of these tests.
var growKey = []byte("hiercomm-grow-test-key-32-bytes!")

// grownConfigs binds the sockets of a grown world of n ranks on
// 127.0.0.1 (TCP) and returns each rank's Config.
func grownConfigs(t *testing.T, n int, connect time.Duration) []nexar.Config {
	t.Helper()
	nets, err := nexar.LocalConfigs("tcp", n, nexar.NetConfig{JobKey: growKey, JobID: "grow-test", ConnectTimeout: connect})
	if err != nil {
		t.Fatal(err)
	}
	cfgs := make([]nexar.Config, n)
	for r := range cfgs {
		cfgs[r] = nexar.Config{Net: nets[r], Network: "tcp", Options: nexar.Options{Timeout: time.Minute}}
	}
	return cfgs
}

// onEach runs fn(r) for r in [0, n), each on its own goroutine (as one
// process per rank would), and returns their errors.
func onEach(n int, fn func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = fn(r) })
	}
	wg.Wait()
	return errs
}

// grow runs Grow on every member of cs (rank r with cfgs[r]) and Join on
// each newcomer (the ranks of cfgs after cs's), and returns what each got.
func grow(ctx context.Context, cs []*nexar.Comm, cfgs []nexar.Config) ([]*nexar.Comm, []error) {
	grown := make([]*nexar.Comm, len(cfgs))
	errs := onEach(len(cfgs), func(r int) error {
		var err error
		if r < len(cs) {
			grown[r], err = cs[r].Grow(ctx, cfgs[r])
		} else {
			grown[r], err = nexar.Join(ctx, cfgs[r])
		}
		return err
	})
	return grown, errs
}

// sumOfRanks checks that an AllReduce of rank-distinct values on every
// rank of cs gives the exact sum.
func sumOfRanks(t *testing.T, cs []*nexar.Comm) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := int64(len(cs))
	for r, err := range onEach(len(cs), func(r int) error {
		x := []int64{int64(r) + 1, int64(r) * 1000}
		if err := cs[r].AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); err != nil {
			return err
		}
		if want := []int64{n * (n + 1) / 2, 1000 * n * (n - 1) / 2}; !slices.Equal(x, want) {
			return fmt.Errorf("AllReduce gave %v, want %v", x, want)
		}
		return nil
	}) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// P members take k newcomers in; every process of the grown world is
// the rank the rule gives it (members keep theirs, newcomers follow in
// the order of Net.Addrs) and the grown world passes the conformance
// suite.
func TestGrowConformance(t *testing.T) {
	for _, l := range []struct {
		members, newcomers int
		old                string // "memory" or "tcp": the world that grows
	}{{2, 1, "tcp"}, {3, 2, "memory"}, {1, 2, "memory"}} {
		t.Run(fmt.Sprintf("%d+%d/%s", l.members, l.newcomers, l.old), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var cs []*nexar.Comm
			var err error
			if l.old == "tcp" {
				cs, err = nexar.NewLocalWorld(ctx, l.members, "tcp", nexar.Options{})
			} else {
				cs, err = nexar.NewMemoryWorld(l.members, nexar.Options{})
			}
			if err != nil {
				t.Fatal(err)
			}
			defer nexar.CloseAll(cs)
			size := l.members + l.newcomers
			grown, errs := grow(ctx, cs, grownConfigs(t, size, 30*time.Second))
			defer nexar.CloseAll(grown)
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			// Each process names itself: a member by its old rank, a
			// newcomer by 100 + its place among the newcomers.
			for r, err := range onEach(size, func(r int) error {
				g := grown[r]
				if g.Rank() != r || g.Size() != size {
					return fmt.Errorf("grown to rank %d of %d, want %d of %d", g.Rank(), g.Size(), r, size)
				}
				me := []int64{int64(r)}
				if r >= l.members {
					me[0] = int64(100 + r - l.members)
				}
				all := make([]int64, size)
				if err := g.AllGather(ctx, comm.Host(me), comm.Host(all)); err != nil {
					return err
				}
				want := make([]int64, size)
				for i := range want {
					want[i] = int64(i)
					if i >= l.members {
						want[i] = int64(100 + i - l.members)
					}
				}
				if !slices.Equal(all, want) {
					return fmt.Errorf("the grown world holds %v, want %v", all, want)
				}
				return nil
			}) {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			// The old communicators were closed by Grow.
			if err := cs[0].Barrier(ctx); !errors.Is(err, comm.ErrClosed) {
				t.Errorf("Barrier on a communicator grown out of: %v, want ErrClosed", err)
			}
			o := commtest.Options{Counts: []int{0, 1, 7, 4099}, Timeout: time.Minute}
			if raceEnabled {
				o.Counts = []int{1, 7, 1000}
			}
			gs := make([]comm.Communicator, size)
			for r, g := range grown {
				gs[r] = g
			}
			commtest.Run(t, gs, o)
		})
	}
}

// A Grow to as many ranks as there are is no Grow: every member gets its
// own communicator back, which works on.
func TestGrowWithNobody(t *testing.T) {
	cs, err := nexar.NewMemoryWorld(3, nexar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nexar.CloseAll(cs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	grown, errs := grow(ctx, cs, grownConfigs(t, 3, 30*time.Second))
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if grown[r] != cs[r] {
			t.Errorf("rank %d: Grow with nobody gave %p, want the communicator itself (%p)", r, grown[r], cs[r])
		}
	}
	sumOfRanks(t, cs)
}

// A failed Grow fails on every member, each error naming what failed,
// and leaves the members' communicator usable.
func TestGrowFailure(t *testing.T) {
	const members, size = 2, 4
	for _, tc := range []struct {
		name string
		// edit changes rank who's grown Config (nil: none).
		who  int
		edit func(cfg *nexar.Config)
		come []int // the newcomers that call Join (the others never come)
		// short: the grown world's ConnectTimeout is short.
		short bool
		want  string // in every member's error
		// wantNewcomer is in the error of every newcomer that came.
		wantNewcomer string
	}{{
		name: "a newcomer never comes", come: []int{2},
		short: true, want: "no connection from rank(s) [3]", wantNewcomer: "no connection from rank(s) [3]",
	}, {
		name: "fewer ranks, and the rank moved", who: 1,
		edit: func(cfg *nexar.Config) { cfg.Net.Addrs, cfg.Net.Rank = cfg.Net.Addrs[:1], 0 },
		want: "Net.Rank is 0, not this member's rank 1",
	}, {
		name: "fewer ranks, same rank", who: 0,
		edit: func(cfg *nexar.Config) { cfg.Net.Addrs = cfg.Net.Addrs[:1] },
		want: "Net.Addrs lists 1 ranks, fewer than the 2 of the communicator to grow",
	}, {
		name: "a rank that moved", who: 1,
		edit: func(cfg *nexar.Config) { cfg.Net.Rank = 3 },
		want: "Net.Rank is 3, not this member's rank 1",
	}, {
		name: "a member's address list differs", who: 1,
		edit: func(cfg *nexar.Config) {
			cfg.Net.Addrs = slices.Clone(cfg.Net.Addrs)
			cfg.Net.Addrs[2] = "127.0.0.1:1"
		},
		want: "the ranks gave different Net.Addrs[2]",
	}, {
		name: "a member's settings differ", who: 0,
		edit: func(cfg *nexar.Config) { cfg.Net.JobID, cfg.Options.SegmentBytes = "another-job", 4096 },
		want: "the ranks gave different Net.JobID, Options.SegmentBytes",
	}, {
		name: "a newcomer's settings differ", who: 3, come: []int{2, 3},
		edit: func(cfg *nexar.Config) { cfg.Options.SegmentBytes = 4096 },
		want: "the ranks gave different Options.SegmentBytes", wantNewcomer: "Options.SegmentBytes",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := nexar.NewMemoryWorld(members, nexar.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer nexar.CloseAll(cs)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			connect := 30 * time.Second
			if tc.short {
				connect = time.Second
			}
			cfgs := grownConfigs(t, size, connect)
			// A newcomer that does not come: its sockets are closed (the
			// others' dials fail as they would to a process not started).
			for r := members; r < size; r++ {
				if !slices.Contains(tc.come, r) {
					cfgs[r].Net.Listener.Close()
				}
			}
			errs := onEach(size, func(r int) error {
				cfg := cfgs[r]
				if tc.edit != nil && r == tc.who {
					tc.edit(&cfg)
				}
				switch {
				case r < members:
					g, err := cs[r].Grow(ctx, cfg)
					if err == nil {
						g.Close()
						return errors.New("Grow succeeded")
					}
					return err
				case slices.Contains(tc.come, r):
					g, err := nexar.Join(ctx, cfg)
					if err == nil {
						g.Close()
						return errors.New("Join succeeded")
					}
					return err
				}
				return nil
			})
			for r, err := range errs {
				want := tc.want
				if r >= members {
					if !slices.Contains(tc.come, r) {
						continue
					}
					want = tc.wantNewcomer
				}
				switch {
				case want == "":
					t.Logf("rank %d (a newcomer): %v", r, err)
				case err == nil:
					t.Errorf("rank %d: no error, want one naming %q", r, want)
				case !strings.Contains(err.Error(), want):
					t.Errorf("rank %d: %v\nwant an error naming %q", r, err, want)
				default:
					t.Logf("rank %d: %v", r, err)
				}
			}
			sumOfRanks(t, cs)
		})
	}
}

// A newcomer that dies after it connected (here it closes: a killed
// process is the same to the others) fails every member's Grow, and the
// members go on on their communicator.
func TestGrowFailsWhenANewcomerDies(t *testing.T) {
	const members, size = 2, 3
	cs, err := nexar.NewMemoryWorld(members, nexar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nexar.CloseAll(cs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfgs := grownConfigs(t, size, 30*time.Second)
	for r, err := range onEach(size, func(r int) error {
		if r >= members {
			g, err := nexar.Connect(ctx, cfgs[r]) // and no Join's agreement
			if err == nil {
				g.Close()
			}
			return nil
		}
		g, err := cs[r].Grow(ctx, cfgs[r])
		if err == nil {
			g.Close()
			return errors.New("Grow succeeded")
		}
		if !strings.Contains(err.Error(), "building the grown world") {
			return fmt.Errorf("%v, want an error of building the grown world", err)
		}
		t.Logf("rank %d: %v", r, err)
		return nil
	}) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	sumOfRanks(t, cs)
}

// Two ranks take a third in. Each member calls Grow with the grown
// world's Config (its rank, every rank's address: the members' new ones
// first); the newcomer calls Join with its own. Every one gets the grown
// world, the members keeping their ranks.
func ExampleComm_Grow() {
	ranks, err := nexar.NewMemoryWorld(2, nexar.Options{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// One socket per rank of the grown world, bound here; each process
	// would bind its own and learn the others' addresses from its
	// launcher.
	nets, err := nexar.LocalConfigs("tcp", 3, nexar.NetConfig{JobKey: []byte("an example job key, 32 bytes ..."), JobID: "example"})
	if err != nil {
		panic(err)
	}
	lines := make([]string, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Go(func() { // one goroutine per process
			cfg := nexar.Config{Net: nets[r], Network: "tcp"}
			var g *nexar.Comm
			var err error
			if r < 2 {
				g, err = ranks[r].Grow(ctx, cfg) // closes ranks[r]
			} else {
				g, err = nexar.Join(ctx, cfg)
			}
			if err != nil {
				panic(err)
			}
			defer g.Close()
			x := []float64{float64(10 * (r + 1))}
			if err := g.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); err != nil {
				panic(err)
			}
			lines[r] = fmt.Sprintf("process %d is rank %d of %d; the sum is %v", r, g.Rank(), g.Size(), x[0])
		})
	}
	wg.Wait()
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// process 0 is rank 0 of 3; the sum is 60
	// process 1 is rank 1 of 3; the sum is 60
	// process 2 is rank 2 of 3; the sum is 60
}
