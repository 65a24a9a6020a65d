package commtest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestFaultsSkips: a skipped case is logged with its reason on every rank
// and not run, and a skip of a name that is not a case fails the suite.
// (The reference communicator tells no peer of a Close or an Abort and
// names no straggler, so the cases themselves run on the tiers: RunFaults
// in nexar, shm, nccl and hierarchy.)
func TestFaultsSkips(t *testing.T) {
	skip := map[string]string{}
	for _, name := range FaultCases {
		skip[name] = "not here"
	}
	var mu sync.Mutex
	var logged []string
	o := Options{Timeout: 2 * time.Second, SkipFaults: skip, Log: func(f string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, fmt.Sprintf(f, args...))
	}}
	if err := worldErrors(2, noBug, FaultsRank, o); err != nil {
		t.Fatalf("every case skipped: %v", err)
	}
	for _, name := range FaultCases {
		want := fmt.Sprintf("%s skipped: not here", name)
		if n := count(logged, want); n != 2 {
			t.Errorf("%q logged %d times; want once on each of 2 ranks (%q)", want, n, logged)
		}
	}
	skip["crash"] = "no such case"
	if err := worldErrors(2, noBug, FaultsRank, o); err == nil || !strings.Contains(err.Error(), `"crash"`) {
		t.Errorf("a skip of a case that does not exist: %v; want the suite to fail naming it", err)
	}
}

func count(lines []string, sub string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}
