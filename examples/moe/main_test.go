package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/cluster"
)

// The test binary is started again as each rank of a local job of
// emulated nodes.
func TestMain(m *testing.M) {
	if cluster.IsLocalChild() {
		if err := run(512, 16, 32, 3); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestExchangesOnTwoNodes runs the example on 2 nodes × 2 ranks (the
// hierarchical world) and on 2 + 3 (heterogeneous: the flat path).
func TestExchangesOnTwoNodes(t *testing.T) {
	for _, layout := range [][]int{{2, 2}, {2, 3}} {
		t.Run(fmt.Sprint(layout), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var out strings.Builder // the launcher writes one line at a time
			job, err := cluster.StartLocal(ctx, cluster.LocalSpec{RanksPerNode: layout, Path: os.Args[0], Args: []string{"-test.run=^$"}, Stdout: &out, Stderr: &out})
			if err != nil {
				t.Fatal(err)
			}
			if err := job.Wait(); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if got := strings.Count(out.String(), "dispatched and combined exactly"); got != sum(layout) {
				t.Fatalf("%d ranks reported success, want %d:\n%s", got, sum(layout), out.String())
			}
		})
	}
}
