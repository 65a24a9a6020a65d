// Package launch is what the example trainers share: running as the parent
// of a local job (starting one process per rank over nexar's local
// launcher) or as one of its ranks, and testing that way.
package launch

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/nexar"
)

// Main runs train in this process if it is a rank of a local job; otherwise
// it starts ranks copies of this program (with the same arguments) and
// waits for them. It exits the process on failure.
func Main(ranks int, network string, train func() error) {
	var err error
	if nexar.IsLocalChild(os.Getenv) {
		err = train()
	} else {
		var job *nexar.LocalJob
		job, err = nexar.StartLocal(context.Background(), nexar.LocalSpec{Ranks: ranks, Network: network, Args: os.Args[1:]})
		if err == nil {
			err = job.Wait()
		}
	}
	if err != nil {
		slog.Error("failed", "program", os.Args[0], "err", err)
		os.Exit(1)
	}
}

// TestMain makes a test binary serve as the ranks that TestRanks starts.
func TestMain(m *testing.M, train func() error) {
	if nexar.IsLocalChild(os.Getenv) {
		if err := train(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRanks runs the test binary's train on ranks processes and fails t if
// any of them fails.
func TestRanks(t *testing.T, ranks int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder // the launcher writes one line at a time
	job, err := nexar.StartLocal(ctx, nexar.LocalSpec{Ranks: ranks, Args: []string{"-test.run=^$"}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
}
