package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
)

// The test binary is started again as each rank of a local job of
// emulated nodes, on the fake GPU.
func TestMain(m *testing.M) {
	if cluster.IsLocalChild() {
		if err := run(100003, 2, true); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestAveragesOnSingleGPUNodes runs the example on one and on three
// emulated single-GPU nodes (the fake spans one process: one rank per
// node), over QUIC.
func TestAveragesOnSingleGPUNodes(t *testing.T) {
	for _, layout := range [][]int{{1}, {1, 1, 1}} {
		t.Run(fmt.Sprint(len(layout)), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var out strings.Builder
			job, err := cluster.StartLocal(ctx, cluster.LocalSpec{RanksPerNode: layout, Path: os.Args[0], Args: []string{"-test.run=^$"},
				Env: []string{launchenv.EnvIntra + "=nccl"}, Stdout: &out, Stderr: &out})
			if err != nil {
				t.Fatal(err)
			}
			if err := job.Wait(); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if got := strings.Count(out.String(), "on device memory correct"); got != len(layout) {
				t.Fatalf("%d ranks reported success, want %d:\n%s", got, len(layout), out.String())
			}
		})
	}
}
