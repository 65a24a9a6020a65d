package nexar

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar/transport/netmesh"
)

// syncWriter collects log output from several goroutines.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// lagging2 finds rank 2 among the peers of the close protocol's warning.
var lagging2 = regexp.MustCompile(`peers=\[([0-9]+ )*2[ \]]`)

// A rank's process dies without a word (its socket just goes quiet), and
// the survivors learn of it before their transport could (a composed
// communicator saw it another way and aborted the world, naming it):
// their Close must not run the close protocol with the dead rank, and
// wait out the linger for a goodbye that never comes (5 s by default).
func TestCloseDoesNotLingerForTheBlamedRank(t *testing.T) {
	var logs syncWriter
	log := slog.New(slog.NewTextHandler(&logs, nil))
	cfgs, err := netmesh.LocalConfigs("udp", 3, NetConfig{JobKey: []byte("hiercomm-linger-test-job-key!!!!"), JobID: "linger-test", FailureTimeout: time.Minute, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	cs := make([]*Comm, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := range cs {
		wg.Go(func() {
			cs[r], errs[r] = Connect(context.Background(), Config{Net: cfgs[r], Network: "quic", Options: Options{Logger: log}})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// Rank 2 goes silent: nothing in or out, and no close protocol.
	cfgs[2].PacketConn.Close()
	t.Cleanup(func() { go cs[2].Close() })

	cs[0].Abort(&comm.PeerError{Peer: 2, Addr: "node 1, local 0", Err: errors.New("its process (pid 4242) is gone")})
	if err := cs[1].Barrier(context.Background()); !errors.Is(err, comm.ErrPeerFailed) {
		t.Fatalf("rank 1: %v, want the failure rank 0 announced", err)
	}
	if err := CloseAll(cs[:2]); err != nil {
		t.Fatal(err)
	}
	// Without the drop, each survivor waits the linger for rank 2 and
	// then says so.
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "closing before some peers finished the close protocol") && lagging2.MatchString(line) {
			t.Errorf("a survivor waited for the dead rank's close protocol: %s", line)
		}
	}
}
