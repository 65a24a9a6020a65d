package cluster

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/topology"
)

func TestDetectorBound(t *testing.T) {
	sec := float64(time.Second)
	for _, tc := range []struct {
		name string
		d    Detector
		n    int
		want time.Duration
	}{
		{"alone", Detector{}, 1, 0},
		// (2n-3+8)*1s + 2*4*max(1, log10 n)*1s + 6*200ms
		{"defaults, 2", Detector{}, 2, 9*time.Second + 8*time.Second + 1200*time.Millisecond},
		{"defaults, 16", Detector{}, 16, 37*time.Second + time.Duration(math.Ceil(4*math.Log10(16)*sec))*2 + 1200*time.Millisecond},
		{"defaults, 100", Detector{}, 100, 205*time.Second + 16*time.Second + 1200*time.Millisecond},
		{"fast, 4", fastDetector, 4, 1300*time.Millisecond + 800*time.Millisecond + 120*time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.d.Bound(tc.n); got != tc.want {
				t.Fatalf("Bound(%d) = %v, want %v", tc.n, got, tc.want)
			}
		})
	}
	for n := 2; n < 2000; n++ {
		if (Detector{}).Bound(n) <= (Detector{}).Bound(n-1) {
			t.Fatalf("Bound(%d) <= Bound(%d)", n, n-1)
		}
	}
}

func TestDetectorValidate(t *testing.T) {
	if d, err := (Detector{}).validate(); err != nil || d.ProbeInterval != DefaultProbeInterval || d.ProbeTimeout != DefaultProbeTimeout ||
		d.SuspicionMult != DefaultSuspicionMult || d.SuspicionMaxTimeoutMult != DefaultSuspicionMaxTimeoutMult || d.GossipInterval != DefaultGossipInterval {
		t.Fatalf("defaults: %+v, %v", d, err)
	}
	for _, tc := range []struct {
		name string
		d    Detector
		want string
	}{
		{"negative", Detector{SuspicionMult: -1}, "negative"},
		{"timeout >= interval", Detector{ProbeInterval: 100 * time.Millisecond}, "ProbeTimeout 500ms must be less than"},
		{"too fast", Detector{ProbeInterval: 500 * time.Microsecond, ProbeTimeout: 100 * time.Microsecond}, "at least 1ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.d.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want one with %q", err, tc.want)
			}
		})
	}
}

func TestFailureError(t *testing.T) {
	f := &Failure{Rank: 3, Member: topology.Member{Rank: 3, Host: "b", Name: "b-1-x", Addr: "10.0.0.7:4000"}}
	const want = "rank 3 (host b, name b-1-x, 10.0.0.7:4000) was declared dead by the failure detector; check its log"
	if f.Error() != want || !errors.Is(f, ErrMemberFailed) {
		t.Fatalf("%q (Is ErrMemberFailed: %v); want %q", f.Error(), errors.Is(f, ErrMemberFailed), want)
	}
}

// TestFailureEvents drives a formed view by hand: a member gone without a
// leave notice raises one Failure, delivered to every callback in
// registration order; a member gone after its notice (or whose notice
// comes late, within the leave window), a repeated death, a stranger's
// death raise none; a callback registered late gets the failures already
// seen.
func TestFailureEvents(t *testing.T) {
	v := viewForTest(t, 4)
	members := map[string]topology.Member{
		"self": {Rank: 0, Host: "a", Local: 0, Device: -1},
		"x":    {Rank: 1, Host: "a", Local: 1, Device: -1},
		"y":    {Rank: 2, Host: "b", Local: 0, Device: -1},
		"z":    {Rank: 3, Host: "b", Local: 1, Device: -1},
	}
	for name, m := range members {
		v.NotifyJoin(gossipNode(t, name, "job", m))
	}
	if topo, _, err := v.evaluate(time.Now(), time.Second); topo == nil || err != nil {
		t.Fatalf("the world did not form: %v", err)
	}
	type call struct {
		cb   string
		rank int
	}
	calls := make(chan call, 16)
	for _, cb := range []string{"first", "second"} {
		v.onFailure(func(f *Failure) { calls <- call{cb, f.Rank} })
	}
	v.NotifyMsg(notice("y")) // y leaves gracefully
	v.NotifyLeave(gossipNode(t, "y", "job", members["y"]))
	v.NotifyLeave(gossipNode(t, "z", "job", members["z"])) // z's notice comes late
	v.NotifyMsg(notice("z"))
	v.NotifyLeave(gossipNode(t, "x", "job", members["x"])) // x dies
	v.NotifyLeave(gossipNode(t, "x", "job", members["x"]))
	v.NotifyLeave(gossipNode(t, "w", "job", topology.Member{Host: "c"})) // not of the world
	v.NotifyMsg([]byte("not a notice"))

	for _, want := range []call{{"first", 1}, {"second", 1}} {
		select {
		case got := <-calls:
			if got != want {
				t.Fatalf("callback %+v, want %+v", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no callback %+v", want)
		}
	}
	v.onFailure(func(f *Failure) { calls <- call{"late", f.Rank} })
	select {
	case got := <-calls:
		if want := (call{"late", 1}); got != want {
			t.Fatalf("callback %+v, want %+v", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no callback for the late registration")
	}
	// The notices received are passed on.
	var passed []string
	for _, b := range v.GetBroadcasts(0, 1400) {
		passed = append(passed, string(b))
	}
	if len(passed) != 2 || !slices.Contains(passed, string(notice("y"))) || !slices.Contains(passed, string(notice("z"))) {
		t.Errorf("passed on %q; want the notices of y and z", passed)
	}
	// Once the view is closed, nothing more is recorded; once the
	// dispatcher has stopped, nothing more runs.
	v.close()
	v.NotifyLeave(gossipNode(t, "y", "job", members["y"]))
	v.disp.stop()
	<-v.disp.done
	v.onFailure(func(f *Failure) { calls <- call{"after stop", f.Rank} })
	if fs := v.failureList(); len(fs) != 1 || fs[0].Rank != 1 || fs[0].Member.Name != "x" {
		t.Fatalf("Failures = %v", fs)
	}
	select {
	case got := <-calls:
		t.Fatalf("callback %+v", got)
	default:
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// TestFailureDetected: a member that dies without a word after the world
// formed is reported, once, on every survivor within Detector.Bound.
func TestFailureDetected(t *testing.T) {
	log, _ := clusterLogger(t, slog.LevelInfo)
	procs := []worldProc{{"a", 0, 0}, {"a", 1, 1}, {"b", 0, 2}, {"b", 1, 3}}
	cs := mustForm(t, joinAll(t, worldConfigs(t, log, procs, 20*time.Second)))
	const victim = 2
	type report struct {
		survivor int
		f        *Failure
		at       time.Time
	}
	reports := make(chan report, 16)
	for i, c := range cs {
		c.OnFailure(func(f *Failure) { reports <- report{i, f, time.Now()} })
	}
	bound := fastDetector.Bound(len(cs))
	crashed := time.Now()
	cs[victim].crash()

	got := make(map[int]bool)
	timeout := time.After(bound + time.Second)
	for len(got) < len(cs)-1 {
		select {
		case r := <-reports:
			took := r.at.Sub(crashed)
			t.Logf("survivor %d: %v after %v (bound %v)", r.survivor, r.f, took, bound)
			if r.survivor == victim || got[r.survivor] {
				t.Fatalf("unexpected report to process %d: %v", r.survivor, r.f)
			}
			got[r.survivor] = true
			if r.f.Rank != victim || r.f.Member.Name != cs[victim].Name() || !strings.Contains(r.f.Error(), "rank 2 (host b") {
				t.Errorf("survivor %d: %v; want rank %d (%s)", r.survivor, r.f, victim, cs[victim].Name())
			}
			if took > bound {
				t.Errorf("survivor %d learned of the death after %v, beyond Bound %v", r.survivor, took, bound)
			}
		case <-timeout:
			t.Fatalf("only %v of the survivors reported the death within %v", got, bound+time.Second)
		}
	}
	for i, c := range cs {
		if n := len(c.Failures()); i != victim && n != 1 {
			t.Errorf("process %d has %d failures, want 1", i, n)
		}
	}
}

// TestLeaveIsNoFailure: a member that leaves gracefully raises no Failure;
// Leave is idempotent and closes the sockets.
func TestLeaveIsNoFailure(t *testing.T) {
	log, buf := clusterLogger(t, slog.LevelInfo)
	cfgs := worldConfigs(t, log, []worldProc{{"a", 0, -1}, {"a", 1, -1}, {"b", 0, -1}}, 20*time.Second)
	port := cfgs[1].Gossip.TCP.Addr().(*net.TCPAddr).Port
	cs := mustForm(t, joinAll(t, cfgs))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := cs[1].Leave(ctx); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if err := cs[1].Leave(ctx); err != nil {
		t.Fatalf("second Leave: %v", err)
	}
	if err := cs[1].Close(); err != nil {
		t.Fatalf("Close after Leave: %v", err)
	}
	// Once a survivor no longer counts the member and holds no verdict
	// on it pending, it has settled the departure: it must have taken it
	// for a graceful one.
	settled := func(i int) bool {
		v := cs[i].view
		v.mu.Lock()
		defer v.mu.Unlock()
		return cs[i].ml.NumMembers() == 2 && len(v.pending) == 0
	}
	for _, i := range []int{0, 2} {
		if !waitFor(fastDetector.Bound(3), func() bool { return settled(i) }) {
			t.Fatalf("process %d has not settled the departure: %d members", i, cs[i].ml.NumMembers())
		}
		if fs := cs[i].Failures(); len(fs) != 0 {
			t.Errorf("process %d: failures %v after a graceful leave", i, fs)
		}
	}
	if n := strings.Count(buf.String(), "left the world gracefully"); n != 2 {
		t.Errorf("%d \"left the world gracefully\" lines in the log, want 2 (one per survivor)", n)
	}
	if s, err := BindGossip("127.0.0.1", port); err != nil {
		t.Errorf("the gossip port is still held after Leave: %v", err)
	} else {
		s.Close()
	}
}
