package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/topology"
)

var memberKey = []byte("0123456789abcdef0123456789abcdef")

// fastDetector makes failures show within a couple of seconds.
var fastDetector = Detector{
	ProbeInterval:           100 * time.Millisecond,
	ProbeTimeout:            50 * time.Millisecond,
	SuspicionMult:           4,
	SuspicionMaxTimeoutMult: 2,
	GossipInterval:          20 * time.Millisecond,
}

// worldProc describes one process of a test world.
type worldProc struct {
	host  string
	local int
	rank  int // the launcher's rank, or -1
}

// worldConfigs binds gossip sockets for every process and returns their
// Configs: job "test", memberKey, seeds = the first process's address, data
// addresses 127.0.0.1:20000+i (published only; nothing listens).
func worldConfigs(t *testing.T, log *slog.Logger, procs []worldProc, joinTimeout time.Duration) []Config {
	t.Helper()
	cfgs := make([]Config, len(procs))
	for i, p := range procs {
		s := bindLoopback(t, "127.0.0.1")
		cfgs[i] = Config{
			JobID:       "test",
			Key:         memberKey,
			Self:        topology.Member{Rank: p.rank, Host: p.host, Local: p.local, Device: -1, Addr: fmt.Sprintf("127.0.0.1:%d", 20000+i)},
			WorldSize:   len(procs),
			Gossip:      s,
			JoinTimeout: joinTimeout,
			Detector:    fastDetector,
			Logger:      log.With("worldProc", i),
		}
	}
	for i := range cfgs {
		cfgs[i].Seeds = []string{cfgs[0].Gossip.Addr()}
	}
	return cfgs
}

type joinResult struct {
	c    *Cluster
	err  error
	took time.Duration
}

// joinAll runs Join for every config at once and waits for all. Every
// Cluster formed is left when the test ends.
func joinAll(t *testing.T, cfgs []Config) []joinResult {
	t.Helper()
	res := make([]joinResult, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Go(func() {
			start := time.Now()
			c, err := Join(t.Context(), cfg)
			res[i] = joinResult{c, err, time.Since(start)}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, r := range res {
			if r.c != nil {
				r.c.Close()
			}
		}
	})
	return res
}

func mustForm(t *testing.T, res []joinResult) []*Cluster {
	t.Helper()
	cs := make([]*Cluster, len(res))
	for i, r := range res {
		if r.err != nil {
			t.Fatalf("process %d: Join: %v", i, r.err)
		}
		cs[i] = r.c
	}
	return cs
}

func TestJoinForms(t *testing.T) {
	// Two hosts, listed out of order; with launcher ranks (cyclic
	// placement) and with ranks assigned by host order.
	for _, tc := range []struct {
		name  string
		procs []worldProc
		want  []int // rank of each process
	}{
		{"launcher ranks", []worldProc{{"b", 0, 1}, {"a", 0, 0}, {"b", 1, 3}, {"a", 1, 2}}, []int{1, 0, 3, 2}},
		{"assigned ranks", []worldProc{{"b", 0, -1}, {"a", 0, -1}, {"b", 1, -1}, {"a", 1, -1}}, []int{2, 0, 3, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, buf := clusterLogger(t, slog.LevelInfo)
			cs := mustForm(t, joinAll(t, worldConfigs(t, log, tc.procs, 20*time.Second)))
			for i, c := range cs {
				if c.Rank() != tc.want[i] {
					t.Errorf("process %d has rank %d, want %d", i, c.Rank(), tc.want[i])
				}
				if !c.Topology().Equal(cs[0].Topology()) {
					t.Errorf("process %d's topology differs from process 0's:\n%v\nvs\n%v", i, c.Topology(), cs[0].Topology())
				}
				m := c.Topology().Member(c.Rank())
				if m.Name != c.Name() || m.Host != tc.procs[i].host || m.Local != tc.procs[i].local || m.Addr != fmt.Sprintf("127.0.0.1:%d", 20000+i) {
					t.Errorf("process %d: the topology's member for its rank is %+v", i, m)
				}
			}
			if got := cs[0].Topology().NumNodes(); got != 2 {
				t.Errorf("%d nodes, want 2", got)
			}
			if !strings.Contains(buf.String(), "4/4 ranks joined; world formed") {
				t.Error("no \"4/4 ranks joined; world formed\" in the log")
			}
		})
	}
}

// TestJoinSeedByName: a seed given by a host name is joined through the
// addresses it resolves to (localhost may also resolve to ::1, which an
// IPv4 process skips); the process the name points at skips itself.
func TestJoinSeedByName(t *testing.T) {
	log, _ := clusterLogger(t, slog.LevelInfo)
	cfgs := worldConfigs(t, log, []worldProc{{"a", 0, -1}, {"b", 0, -1}}, 20*time.Second)
	_, port, _ := net.SplitHostPort(cfgs[0].Gossip.Addr())
	for i := range cfgs {
		cfgs[i].Seeds = []string{net.JoinHostPort("localhost", port)}
	}
	cs := mustForm(t, joinAll(t, cfgs))
	if !cs[0].Topology().Equal(cs[1].Topology()) || cs[0].Rank() != 0 || cs[1].Rank() != 1 {
		t.Fatalf("ranks %d, %d; topologies\n%v\n%v", cs[0].Rank(), cs[1].Rank(), cs[0].Topology(), cs[1].Topology())
	}
}

func TestJoinWorldOfOne(t *testing.T) {
	log, _ := clusterLogger(t, slog.LevelInfo)
	start := time.Now()
	c, err := Join(t.Context(), Config{
		JobID: "solo", Key: memberKey, WorldSize: 1, Gossip: bindLoopback(t, "127.0.0.1"),
		Self: topology.Member{Rank: -1, Host: "h", Device: -1}, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Rank() != 0 || c.Topology().Size() != 1 || time.Since(start) > 5*time.Second {
		t.Fatalf("rank %d, size %d, took %v", c.Rank(), c.Topology().Size(), time.Since(start))
	}
}

// TestJoinOutsider: a process with another key, or another job id, cannot
// join a world; it fails within its JoinTimeout saying the key or job id
// likely differs, and the members never see it.
func TestJoinOutsider(t *testing.T) {
	for _, tc := range []struct {
		name  string
		key   []byte
		jobID string
	}{
		{"other key", []byte("another key, 16 bytes or more"), "test"},
		{"other job id", memberKey, "other-job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, _ := clusterLogger(t, slog.LevelInfo)
			cfgs := worldConfigs(t, log, []worldProc{{"a", 0, 0}, {"a", 1, 1}}, 20*time.Second)
			cs := mustForm(t, joinAll(t, cfgs))

			const timeout = time.Second
			out := Config{
				JobID: tc.jobID, Key: tc.key, WorldSize: 3, Seeds: cfgs[0].Seeds,
				Self:   topology.Member{Rank: 2, Host: "b", Device: -1},
				Gossip: bindLoopback(t, "127.0.0.1"), JoinTimeout: timeout, Detector: fastDetector,
				Logger: log.With("worldProc", "outsider"),
			}
			start := time.Now()
			c, err := Join(t.Context(), out)
			took := time.Since(start)
			if err == nil {
				c.Close()
				t.Fatal("the outsider joined")
			}
			t.Logf("after %v: %v", took, err)
			if !errors.Is(err, ErrWorldIncomplete) || took > timeout+2*time.Second {
				t.Fatalf("after %v: %v; want ErrWorldIncomplete within %v", took, err, timeout)
			}
			for _, want := range []string{"1/3 ranks joined", "encrypted exchange failed", "HIERCOMM_JOB_KEY and HIERCOMM_JOB_ID"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error lacks %q: %v", want, err)
				}
			}
			for i, c := range cs {
				present, _, foreign := c.view.snapshot()
				if n := c.ml.NumMembers(); n != 2 || len(present) != 2 || len(foreign) != 0 {
					t.Errorf("process %d sees %d gossip members, %d of the job, foreign %v; want 2, 2, none", i, n, len(present), foreign)
				}
			}
		})
	}
}

// TestJoinIncomplete: a world that never completes ends, on every process,
// within JoinTimeout with an error that counts who joined and names who is
// missing; progress is logged meanwhile.
func TestJoinIncomplete(t *testing.T) {
	log, buf := clusterLogger(t, slog.LevelInfo)
	const timeout = 1500 * time.Millisecond
	cfgs := worldConfigs(t, log, []worldProc{{"a", 0, 0}, {"a", 1, 1}, {"b", 0, 2}}, timeout)
	cfgs[2].Gossip.Close() // rank 2 never starts
	for _, r := range joinAll(t, cfgs[:2]) {
		if r.c != nil {
			t.Fatal("a world of 3 formed with 2")
		}
		t.Logf("after %v: %v", r.took, r.err)
		if !errors.Is(r.err, ErrWorldIncomplete) || r.took > timeout+2*time.Second {
			t.Fatalf("after %v: %v; want ErrWorldIncomplete within %v", r.took, r.err, timeout)
		}
		for _, want := range []string{"2/3 ranks joined after", "missing: ranks 2", "every process was started"} {
			if !strings.Contains(r.err.Error(), want) {
				t.Errorf("the error lacks %q: %v", want, r.err)
			}
		}
		var je *JoinError
		if !errors.As(r.err, &je) || je.Joined != 2 || je.WorldSize != 3 || len(je.Present) != 2 {
			t.Errorf("JoinError = %+v", je)
		}
	}
	if !strings.Contains(buf.String(), "2/3 ranks joined") {
		t.Error("no progress line \"2/3 ranks joined\" in the log")
	}
}

// TestJoinConflict: two processes claiming one rank, or one host and
// local index: every process fails, naming both.
func TestJoinConflict(t *testing.T) {
	for _, tc := range []struct {
		name  string
		procs []worldProc
		want  []string
	}{
		{"duplicate rank", []worldProc{{"a", 0, 0}, {"b", 0, 1}, {"c", 0, 1}}, []string{"claim rank 1", "host b", "host c", "RANK"}},
		{"duplicate local", []worldProc{{"a", 0, -1}, {"a", 1, -1}, {"a", 1, -1}}, []string{"claim host a, local index 1", "LOCAL_RANK"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, _ := clusterLogger(t, slog.LevelInfo)
			const timeout = 20 * time.Second
			for i, r := range joinAll(t, worldConfigs(t, log, tc.procs, timeout)) {
				if r.err == nil {
					t.Fatalf("process %d formed a world", i)
				}
				t.Logf("process %d after %v: %v", i, r.took, r.err)
				if !errors.Is(r.err, ErrWorldInvalid) || r.took > 5*time.Second {
					t.Errorf("process %d after %v: %v; want ErrWorldInvalid, quickly", i, r.took, r.err)
				}
				for _, want := range tc.want {
					if !strings.Contains(r.err.Error(), want) {
						t.Errorf("process %d: the error lacks %q: %v", i, want, r.err)
					}
				}
			}
		})
	}
}

// TestJoinDisagreement: processes launched with different settings of
// Config.Agree (here one with another network) do not form a world: every
// process fails quickly with ErrWorldInvalid naming the member and each
// setting that differs, with both values; processes that agree form it.
func TestJoinDisagreement(t *testing.T) {
	log, _ := clusterLogger(t, slog.LevelInfo)
	procs := []worldProc{{"a", 0, -1}, {"b", 0, -1}, {"c", 0, -1}}
	cfgs := worldConfigs(t, log, procs, 20*time.Second)
	for i := range cfgs {
		network := "quic"
		if i == 2 {
			network = "tcp"
		}
		cfgs[i].Agree = []Setting{{"HIERCOMM_NETWORK", network}, {"HIERCOMM_INTRA", "auto"}}
	}
	for i, r := range joinAll(t, cfgs) {
		if r.err == nil {
			t.Fatalf("process %d formed a world with a member launched otherwise", i)
		}
		want := `HIERCOMM_NETWORK: "quic" here, "tcp" there`
		if i == 2 {
			want = `HIERCOMM_NETWORK: "tcp" here, "quic" there`
		}
		if !errors.Is(r.err, ErrWorldInvalid) || r.took > 5*time.Second || !strings.Contains(r.err.Error(), want) || strings.Contains(r.err.Error(), "HIERCOMM_INTRA") {
			t.Errorf("process %d after %v: %v; want ErrWorldInvalid, quickly, with %q and no other setting", i, r.took, r.err, want)
		}
	}
	cfgs = worldConfigs(t, log, procs, 20*time.Second)
	for i := range cfgs {
		cfgs[i].Agree = []Setting{{"HIERCOMM_NETWORK", "tcp"}}
	}
	mustForm(t, joinAll(t, cfgs))
}

func TestJoinUnreachableSeed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String() // nothing listens there after Close
	ln.Close()
	for _, tc := range []struct {
		name     string
		seed     string
		timeout  time.Duration
		within   time.Duration
		sentinel error
		want     []string
	}{
		{"nothing listens", closed, time.Second, 3 * time.Second, ErrWorldIncomplete,
			[]string{"1/2 ranks joined", "never reached", "connection refused", "nothing listens there"}},
		// From a loopback address, Linux cannot route to another host
		// at all: no point waiting.
		{"no route from this interface", "192.0.2.1:9", 20 * time.Second, 3 * time.Second, ErrSeedUnreachable,
			[]string{"cannot reach seed 192.0.2.1:9", "HIERCOMM_SOCKET_IFNAME"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.sentinel == ErrSeedUnreachable && runtime.GOOS != "linux" {
				t.Skip("the loopback routing rule is Linux's")
			}
			log, _ := clusterLogger(t, slog.LevelInfo)
			start := time.Now()
			c, err := Join(t.Context(), Config{
				JobID: "test", Key: memberKey, WorldSize: 2, Seeds: []string{tc.seed},
				Self:   topology.Member{Rank: 0, Host: "a", Device: -1},
				Gossip: bindLoopback(t, "127.0.0.1"), JoinTimeout: tc.timeout, Detector: fastDetector, Logger: log,
			})
			took := time.Since(start)
			if err == nil {
				c.Close()
				t.Fatal("joined")
			}
			t.Logf("after %v: %v", took, err)
			if !errors.Is(err, tc.sentinel) || took > tc.within {
				t.Fatalf("after %v: %v; want %v within %v", took, err, tc.sentinel, tc.within)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error lacks %q: %v", want, err)
				}
			}
		})
	}
}

func TestJoinCanceled(t *testing.T) {
	log, _ := clusterLogger(t, slog.LevelInfo)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	s := bindLoopback(t, "127.0.0.1")
	_, err := Join(ctx, Config{
		JobID: "test", Key: memberKey, WorldSize: 2, Seeds: []string{s.Addr()},
		Self: topology.Member{Rank: 0, Host: "a", Device: -1}, Gossip: s, Logger: log,
	})
	if !errors.Is(err, ErrWorldIncomplete) || !errors.Is(err, context.Canceled) || time.Since(start) > 3*time.Second {
		t.Fatalf("after %v: %v; want ErrWorldIncomplete and context.Canceled", time.Since(start), err)
	}
	// Join closed the sockets on failure.
	if s2, err := BindGossip("127.0.0.1", s.TCP.Addr().(*net.TCPAddr).Port); err != nil {
		t.Errorf("the gossip port is still held after a failed Join: %v", err)
	} else {
		s2.Close()
	}
}

func TestConfigValidate(t *testing.T) {
	s := bindLoopback(t, "127.0.0.1")
	defer s.Close()
	good := Config{JobID: "j", Key: memberKey, WorldSize: 2, Seeds: []string{"10.0.0.1:29500"}, Gossip: s,
		Self: topology.Member{Rank: -1, Host: "h", Device: -1, Addr: "10.0.0.2:4000"}}
	if _, err := good.validate(); err != nil {
		t.Fatalf("a good Config: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no job id", func(c *Config) { c.JobID = "" }, "JobID"},
		{"short key", func(c *Config) { c.Key = []byte("short") }, "openssl rand"},
		{"world size", func(c *Config) { c.WorldSize = 0 }, "WorldSize"},
		{"no host", func(c *Config) { c.Self.Host = "" }, "Self.Host"},
		{"local", func(c *Config) { c.Self.Local = -1 }, "Self.Local"},
		{"device", func(c *Config) { c.Self.Device = -2 }, "Self.Device"},
		{"rank out of range", func(c *Config) { c.Self.Rank = 2 }, "Self.Rank 2 is not in [0, 2)"},
		{"addr", func(c *Config) { c.Self.Addr = "10.0.0.2" }, "Self.Addr"},
		{"unspecified addr", func(c *Config) { c.Self.Addr = "0.0.0.0:4000" }, "unspecified"},
		{"no seeds", func(c *Config) { c.Seeds = nil }, "Seeds is empty"},
		{"bad seed", func(c *Config) { c.Seeds = []string{"10.0.0.1:0"} }, "Seeds[0]"},
		{"no sockets", func(c *Config) { c.Gossip = Sockets{} }, "Gossip"},
		{"negative timeout", func(c *Config) { c.JoinTimeout = -1 }, "JoinTimeout"},
		{"probe timeout", func(c *Config) { c.Detector.ProbeTimeout = 2 * time.Second }, "ProbeTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			c.Key = append([]byte(nil), good.Key...)
			tc.change(&c)
			if _, err := c.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want one naming %q", err, tc.want)
			}
		})
	}
	// Defaults, and the caller's struct is not touched.
	v, _ := good.validate()
	if v.JoinTimeout != launchenv.DefaultJoinTimeout || v.Detector.ProbeInterval != DefaultProbeInterval || v.Logger == nil || good.JoinTimeout != 0 {
		t.Errorf("defaults: %+v", v)
	}
}

// TestGossipKey: the gossip key is bound to the job id and the key.
func TestGossipKey(t *testing.T) {
	a, _ := gossipKey(memberKey, "job-a")
	a2, _ := gossipKey(memberKey, "job-a")
	b, _ := gossipKey(memberKey, "job-b")
	c, _ := gossipKey([]byte("another key, 16 bytes or more"), "job-a")
	if len(a) != 32 || string(a) != string(a2) || string(a) == string(b) || string(a) == string(c) {
		t.Fatalf("keys: %x %x %x %x", a, a2, b, c)
	}
}

// viewForTest is a view fed by hand, without gossip, with fastDetector's
// leave window.
func viewForTest(t *testing.T, worldSize int) *view {
	t.Helper()
	log, _ := clusterLogger(t, slog.LevelDebug)
	d := newDispatcher()
	t.Cleanup(d.stop)
	return newView(Config{JobID: "job", WorldSize: worldSize, Logger: log, Detector: fastDetector}, "self", nil, d)
}

// gossipNode is a memberlist node of job with member m.
func gossipNode(t *testing.T, name, job string, m topology.Member) *memberlist.Node {
	t.Helper()
	meta, err := encodeMeta(job, m, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	return &memberlist.Node{Name: name, Addr: net.IPv4(127, 0, 0, 1), Port: 1, Meta: meta}
}

// notice is the leave notice of the member named name.
func notice(name string) []byte { return newNoticeBroadcast(name, nil).Message() }

// Member events fed to a view.
const (
	joins  = iota // NotifyJoin
	leaves        // its leave notice, then NotifyLeave
	dies          // NotifyLeave without a notice
)

// TestEvaluate drives the view through member events and checks what the
// join concludes, without gossip.
func TestEvaluate(t *testing.T) {
	const grace = time.Second
	m := func(rank int, host string, local int) topology.Member {
		return topology.Member{Rank: rank, Host: host, Local: local, Device: -1}
	}
	type event struct {
		name string
		job  string // "" = "job"
		m    topology.Member
		kind int
	}
	for _, tc := range []struct {
		name      string
		worldSize int
		events    []event
		after     time.Duration // evaluate this long after the events
		wantErr   error
		want      string // in the error
		formed    bool
	}{
		{"complete", 2, []event{{"x", "", m(0, "a", 0), joins}, {"y", "", m(1, "a", 1), joins}}, 0, nil, "", true},
		{"waiting", 3, []event{{"x", "", m(0, "a", 0), joins}}, 0, nil, "", false},
		{"other job ignored", 2, []event{{"x", "", m(0, "a", 0), joins}, {"y", "other", m(1, "a", 1), joins}}, 0, nil, "", false},
		{"rank out of range", 2, []event{{"x", "", m(5, "a", 0), joins}}, 0, ErrWorldInvalid, "claims rank 5, but the world size is 2", false},
		{"too many", 2, []event{{"x", "", m(-1, "a", 0), joins}, {"y", "", m(-1, "a", 1), joins}, {"z", "", m(-1, "b", 0), joins}},
			0, ErrWorldInvalid, "3 processes of job \"job\" joined, but the world size is 2", false},
		{"full set topology rejects", 2, []event{{"x", "", m(0, "a", 0), joins}, {"y", "", m(-1, "b", 0), joins}},
			0, ErrWorldInvalid, "cannot form a world", false},
		{"dead before formation, in grace", 3, []event{{"x", "", m(0, "a", 0), joins}, {"x", "", m(0, "a", 0), dies}},
			0, nil, "", false},
		{"dead before formation, after grace", 3, []event{{"x", "", m(0, "a", 0), joins}, {"x", "", m(0, "a", 0), dies}},
			2 * grace, ErrMemberLost, "rank 0 (host a, local 0, name x) was declared dead (it left no notice) before the world", false},
		{"left, set full", 2, []event{{"x", "", m(0, "a", 0), joins}, {"y", "", m(1, "a", 1), joins}, {"x", "", m(0, "a", 0), leaves}},
			0, ErrMemberLost, "rank 0 (host a, local 0, name x) left before the world", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := viewForTest(t, tc.worldSize)
			for _, e := range tc.events {
				job := e.job
				if job == "" {
					job = "job"
				}
				n := gossipNode(t, e.name, job, e.m)
				switch e.kind {
				case joins:
					v.NotifyJoin(n)
				case leaves:
					v.NotifyMsg(notice(e.name))
					v.NotifyLeave(n)
				case dies:
					v.NotifyLeave(n)
				}
			}
			topo, _, err := v.evaluate(time.Now().Add(tc.after), grace)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("err = %v", err)
			case tc.wantErr != nil && (err == nil || !errors.Is(err, tc.wantErr) || !strings.Contains(err.msg, tc.want)):
				t.Fatalf("err = %v; want %v with %q", err, tc.wantErr, tc.want)
			case (topo != nil) != tc.formed:
				t.Fatalf("formed = %v, want %v", topo != nil, tc.formed)
			}
		})
	}
}
