package nexar_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/nexar"
	"github.com/hiercomm/hiercomm/nexar/transport/netmesh"
)

// growKey is the job key of the grown worlds of these tests.
var growKey = []byte("hiercomm-grow-test-key-32-bytes!")

// grownConfigs binds the sockets of a grown world of n ranks on
// 127.0.0.1 (TCP) and returns each rank's Config.
func grownConfigs(t *testing.T, n int, connect time.Duration) []nexar.Config {
	t.Helper()
	nets, err := netmesh.LocalConfigs("tcp", n, nexar.NetConfig{JobKey: growKey, JobID: "grow-test", ConnectTimeout: connect})
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

// stillWorks runs a few exact collectives with rank-distinct data on
// every rank of cs.
func stillWorks(t *testing.T, cs []*nexar.Comm) {
	t.Helper()
	commtest.Run(t, asComms(cs), commtest.Options{Counts: []int{1, 7}, DTypes: []comm.DType{comm.F32, comm.I64}, Timeout: time.Minute})
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
			cfgs := grownConfigs(t, l.members+l.newcomers, 30*time.Second)
			o := commtest.Options{Counts: []int{0, 1, 7, 4099}, Timeout: time.Minute}
			if raceEnabled {
				o.Counts = []int{1, 7, 1000}
			}
			commtest.RunGrow(t, asComms(cs), l.newcomers, func(ctx context.Context, r int) (comm.Communicator, error) {
				if r < len(cs) {
					return cs[r].Grow(ctx, cfgs[r])
				}
				return nexar.Join(ctx, cfgs[r])
			}, o)
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
	stillWorks(t, cs)
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
		// dies: the newcomer that connects with Connect, and closes (as a
		// process that dies), instead of Join; 0: none.
		dies int
		// short: the grown world's ConnectTimeout is short.
		short bool
		want  string // in every member's error
		// wantNewcomer is in the error of every newcomer that came.
		wantNewcomer string
	}{{
		name: "a newcomer never comes", come: []int{2},
		short: true, want: "no connection from rank(s) [3]", wantNewcomer: "no connection from rank(s) [3]",
	}, {
		name: "a newcomer dies", come: []int{2}, dies: 3,
		want: "building the grown communicator",
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
		name: "a member's Config is invalid", who: 1,
		edit: func(cfg *nexar.Config) { cfg.Net.JobKey = []byte("short") },
		want: "JobKey has 5 bytes",
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
			commtest.RunGrowFailure(t, asComms(cs), size-members, func(ctx context.Context, r int) (comm.Communicator, error) {
				cfg := cfgs[r]
				if tc.edit != nil && r == tc.who {
					tc.edit(&cfg)
				}
				switch {
				case r < members:
					return cs[r].Grow(ctx, cfg)
				case r == tc.dies:
					if g, err := nexar.Connect(ctx, cfg); err == nil {
						g.Close()
					}
					return nil, nil
				case slices.Contains(tc.come, r):
					return nexar.Join(ctx, cfg)
				}
				return nil, nil
			}, tc.want, tc.wantNewcomer, commtest.Options{Timeout: time.Minute})
		})
	}
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
	nets, err := netmesh.LocalConfigs("tcp", 3, nexar.NetConfig{JobKey: []byte("an example job key, 32 bytes ..."), JobID: "example"})
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

// A member that dies before it grows (its communicator closed, as its
// process's would be, and it never calls Grow): every other member's Grow
// ends with an error that names it, and the newcomer's Join ends too, at
// its ConnectTimeout at the latest. No one waits for the old world's
// Timeout.
func TestGrowMemberGone(t *testing.T) {
	const members, size, gone, connect = 3, 4, 2, 2 * time.Second
	cs, err := nexar.NewMemoryWorld(members, nexar.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer nexar.CloseAll(cs)
	cfgs := grownConfigs(t, size, connect)
	cfgs[gone].Net.Listener.Close()
	commtest.RunGrowMemberGone(t, asComms(cs), size-members, gone, comm.Communicator.Close, func(ctx context.Context, r int) (comm.Communicator, error) {
		if r < members {
			return cs[r].Grow(ctx, cfgs[r])
		}
		return nexar.Join(ctx, cfgs[r])
	}, 3*connect)
}
