package cluster

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/topology"
)

// A process launched to join a running job (Joining) waits among the
// members' Waiting; once they Admit the grown world, its Join returns
// with that world and its rank, and its failure is then reported to
// every member with its rank in the grown world. A process with another
// key is never seen, and its Join ends with ErrNotAdmitted.
func TestJoinRunningJob(t *testing.T) {
	log, buf := clusterLogger(t, slog.LevelInfo)
	cfgs := worldConfigs(t, log, []worldProc{{"a", 0, -1}, {"b", 0, -1}}, 20*time.Second)
	cs := mustForm(t, joinAll(t, cfgs))

	joining := func(key []byte, name string, local int, timeout time.Duration) Config {
		return Config{
			JobID: "test", Key: key, WorldSize: 2, Seeds: cfgs[0].Seeds, Joining: true,
			Self:   topology.Member{Rank: 0, Host: "b", Local: local, Device: -1, Addr: "127.0.0.1:20009"},
			Gossip: bindLoopback(t, "127.0.0.1"), JoinTimeout: timeout, Detector: fastDetector,
			Logger: log.With("worldProc", name),
		}
	}
	type result struct {
		c   *Cluster
		err error
	}
	newcomer, outsider := make(chan result, 1), make(chan result, 1)
	go func() {
		c, err := Join(t.Context(), joining(memberKey, "newcomer", 7, 20*time.Second))
		newcomer <- result{c, err}
	}()
	go func() {
		c, err := Join(t.Context(), joining([]byte("another key, 16 bytes or more"), "outsider", 8, 2*time.Second))
		outsider <- result{c, err}
	}()

	var waiting []topology.Member
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		waiting = cs[0].Waiting()
		if len(waiting) > 0 && len(cs[1].Waiting()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the members never saw the newcomer waiting\n%s", buf)
		}
	}
	if len(waiting) != 1 || waiting[0].Host != "b" || waiting[0].Local != 7 || waiting[0].Addr != "127.0.0.1:20009" {
		t.Fatalf("Waiting() = %+v, want the newcomer alone", waiting)
	}
	grown, err := cs[0].Topology().Grown(waiting)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if err := c.Admit(grown, 1); err != nil {
			t.Fatal(err)
		}
	}
	r := <-newcomer
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	if r.c.Rank() != 2 || !r.c.Topology().Equal(grown) || r.c.Generation() != 1 {
		t.Fatalf("the newcomer is rank %d of\n%v\ngeneration %d; want rank 2 of\n%v", r.c.Rank(), r.c.Topology(), r.c.Generation(), grown)
	}
	if m := grown.Member(2); m.Local != 1 || grown.NodeOf(2) != 1 {
		t.Errorf("the newcomer is %+v on node %d; want local 1 of node 1 (host b)", m, grown.NodeOf(2))
	}
	for i, c := range cs {
		if c.Rank() != i || !c.Topology().Equal(grown) || len(c.Waiting()) != 0 {
			t.Errorf("member %d: rank %d, waiting %v, topology\n%v", i, c.Rank(), c.Waiting(), c.Topology())
		}
	}

	o := <-outsider
	if o.err == nil {
		o.c.Close()
		t.Fatal("a process with another key was admitted")
	}
	if !errors.Is(o.err, ErrNotAdmitted) || !strings.Contains(o.err.Error(), "no seed answered") {
		t.Errorf("the outsider's Join: %v; want ErrNotAdmitted, saying that no seed answered", o.err)
	}

	failed := make(chan *Failure, 2)
	for _, c := range cs {
		c.OnFailure(func(f *Failure) { failed <- f })
	}
	r.c.crash()
	for range cs {
		select {
		case f := <-failed:
			if f.Rank != 2 {
				t.Errorf("a member reported rank %d failed, want 2 (the newcomer)", f.Rank)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("the newcomer's death was not reported\n%s", buf)
		}
	}
}
