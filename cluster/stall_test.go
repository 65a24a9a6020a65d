package cluster

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// Issue 28: Join and Leave must not stall at the edges of a job, when
// every process starts or ends at once. The soak of whole Init/Close
// cycles is TestInitCloseCycles in the root package.

// gossipOnly is a detector that probes nobody within a test (an ack
// carries the prober's news as gossip does) and gossips every interval.
func gossipOnly(interval time.Duration) Detector {
	return Detector{ProbeInterval: time.Minute, ProbeTimeout: 30 * time.Second, GossipInterval: interval}
}

// TestJoinLearnsLateMembersFromTheSeed: a member that reached the seed
// after this process's exchange with it, and whose gossip never reaches
// this process, is learned from the seed soon, not rejoinInterval (5 s)
// later. (At start-up gossip passes a newcomer on a few times, to random
// members that may not know this process yet: in 2 of 34 runs of a 2 × 3
// Kubernetes-style job one rank waited 5 s, and so did every other rank's
// Init, for it.)
func TestJoinLearnsLateMembersFromTheSeed(t *testing.T) {
	log, _ := clusterLogger(t, slog.LevelDebug)
	cfgs := worldConfigs(t, log, []worldProc{{"a", 0, -1}, {"a", 1, -1}, {"b", 0, -1}}, 20*time.Second)
	// The seed and the late member never gossip within the test: news
	// reaches the process under test by push/pull alone (its own gossip
	// rounds tell it nothing).
	cfgs[0].Detector, cfgs[2].Detector = gossipOnly(time.Minute), gossipOnly(time.Minute)
	cfgs[1].Detector = gossipOnly(20 * time.Millisecond)
	ctx := t.Context()
	type result struct {
		c    *Cluster
		err  error
		took time.Duration
	}
	results := make([]chan result, len(cfgs))
	join := func(i int) {
		results[i] = make(chan result, 1)
		go func() {
			start := time.Now()
			c, err := Join(ctx, cfgs[i])
			results[i] <- result{c, err, time.Since(start)}
		}()
	}
	var formed []*Cluster
	t.Cleanup(func() {
		for _, c := range formed {
			c.crash() // the quiet ones could not say goodbye in time
		}
	})
	// The seed, then the process under test; the late member once the
	// process under test has had its exchange with the seed (a few ms;
	// were the late member first, the test would show nothing).
	join(0)
	join(1)
	time.Sleep(500 * time.Millisecond)
	join(2)
	for i, ch := range results {
		r := <-ch
		if r.err != nil {
			t.Fatalf("process %d: Join: %v", i, r.err)
		}
		formed = append(formed, r.c)
		if i == 1 {
			t.Logf("the process under test formed the world after %v", r.took)
			if r.took > rejoinInterval/2 {
				t.Errorf("the process under test took %v to form the world: it waited for the rejoin (%v) to learn of the late member, which the seed knew", r.took, rejoinInterval)
			}
		}
	}
}

// TestLeaveWhileTheOthersLeave: at the end of a job every member leaves at
// once. memberlist's Leave waited for its own leave message to go out
// even when the others had left in the meantime, so that no packet could
// carry it: 3 of 421 Closes in clean runs took 5 s and failed ("timeout
// waiting for leave broadcast"). Leave must return without an error as
// soon as nobody is left to hear it, whether the others leave once its
// notice is out or while it waits for that.
func TestLeaveWhileTheOthersLeave(t *testing.T) {
	for _, tc := range []struct {
		name string
		// onceOut: the others leave once the leaver's notice has gone
		// out (its queue was filled and is empty again), not as soon as
		// it is queued.
		onceOut bool
	}{{"once its notice is out", true}, {"while it waits", false}} {
		t.Run(tc.name, func(t *testing.T) {
			log, _ := clusterLogger(t, slog.LevelDebug)
			cfgs := worldConfigs(t, log, []worldProc{{"a", 0, -1}, {"a", 1, -1}, {"b", 0, -1}}, 20*time.Second)
			// The leaver gossips every 500 ms, the others every 20
			// ms, so that their departures reach it between two of its
			// rounds (acks to their probes would carry its messages
			// too).
			cfgs[0].Detector = gossipOnly(500 * time.Millisecond)
			for i := 1; i < len(cfgs); i++ {
				cfgs[i].Detector = gossipOnly(20 * time.Millisecond)
			}
			cs := mustForm(t, joinAll(t, cfgs))
			leaver := cs[0]
			type result struct {
				err  error
				took time.Duration
			}
			done := make(chan result, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				start := time.Now()
				err := leaver.Leave(ctx)
				done <- result{err, time.Since(start)}
			}()
			queued := func() bool { return leaver.view.notices.NumQueued() > 0 }
			if !waitFor(5*time.Second, queued) {
				t.Fatal("the leaver never queued its notice")
			}
			if tc.onceOut && !waitFor(5*time.Second, func() bool { return !queued() }) {
				t.Fatal("the leaver's notice never went out")
			}
			// The others leave memberlist, as their own Leave does: the
			// leaver sees them gone (their notices are beside the
			// point here).
			var wg sync.WaitGroup
			for _, c := range cs[1:] {
				wg.Go(func() {
					c.ml.Leave(time.Second)
					c.crash()
				})
			}
			wg.Wait()
			r := <-done
			t.Logf("Leave returned after %v: %v", r.took, r.err)
			if r.err != nil {
				t.Errorf("Leave: %v", r.err)
			}
			if r.took > 2*time.Second {
				t.Errorf("Leave took %v: it waited for members that had left", r.took)
			}
		})
	}
}
