package hiercomm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
)

// Two processes of one job, one launched with HIERCOMM_NETWORK=tcp and the
// other with quic, would decide different Plans and build communicators
// that never meet. Membership compares the settings the Plans are decided
// from before the world forms: both Inits fail at once, naming the setting
// and both values, instead of waiting for the data mesh's deadline.
func TestInitRefusesRanksLaunchedOtherwise(t *testing.T) {
	networks := []string{"quic", "tcp"}
	errs, took := initPair(t, func(r int, l *launchenv.Launch, _ *hiercomm.Options) { l.Network = networks[r] })
	for r, err := range errs {
		want := fmt.Sprintf("%s: %q here, %q there", launchenv.EnvNetwork, networks[r], networks[1-r])
		if err == nil || !errors.Is(err, cluster.ErrWorldInvalid) || !strings.Contains(err.Error(), want) || took[r] > 20*time.Second {
			t.Errorf("rank %d after %v: %v; want cluster.ErrWorldInvalid with %q", r, took[r], err, want)
		}
	}
}

// Two processes given different FailureTimeouts would judge each other's
// silence by different clocks: the one with the longer timeout heartbeats
// too seldom for the other. The tiers' FailureTimeouts are among the
// settings membership compares, so both Inits fail before the world
// forms, naming the timeout and both values.
func TestInitRefusesRanksGivenOtherFailureTimeouts(t *testing.T) {
	timeouts := []time.Duration{10 * time.Second, 3 * time.Second}
	errs, _ := initPair(t, func(r int, _ *launchenv.Launch, opt *hiercomm.Options) { opt.FailureTimeout = timeouts[r] })
	for r, err := range errs {
		want := fmt.Sprintf("the network's FailureTimeout (Options.FailureTimeout): %q here, %q there", timeouts[r], timeouts[1-r])
		if err == nil || !errors.Is(err, cluster.ErrWorldInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: %v; want cluster.ErrWorldInvalid with %q", r, err, want)
		}
	}
}

// initPair runs Init on two processes of one job, each launched as
// explicit options over the default network that set changes, and
// returns each one's error and how long its Init took.
func initPair(t *testing.T, set func(r int, l *launchenv.Launch, opt *hiercomm.Options)) ([]error, []time.Duration) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // rank 0 binds it for gossip
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, 2)
	took := make([]time.Duration, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		l := &launchenv.Launch{
			Style: launchenv.StyleExplicit, WorldSize: 2, Rank: r, Host: fmt.Sprintf("agree-%d", r), Device: -1,
			Addr: "127.0.0.1", Seeds: []string{fmt.Sprintf("127.0.0.1:%d", port)}, JobID: "agree-test",
			Key: []byte("0123456789abcdef0123456789abcdef"), Intra: "shm", JoinTimeout: 30 * time.Second,
		}
		if r == 0 {
			l.GossipPort = port
		}
		opt := hiercomm.Options{Launch: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		set(r, l, &opt)
		wg.Go(func() {
			start := time.Now()
			w, err := hiercomm.Init(ctx, opt)
			if err == nil {
				w.Close()
			}
			errs[r], took[r] = err, time.Since(start)
		})
	}
	wg.Wait()
	for r, err := range errs {
		t.Logf("rank %d after %v: %v", r, took[r].Round(time.Millisecond), err)
	}
	return errs, took
}
