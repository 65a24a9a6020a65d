package hiercomm_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/cluster"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/internal/netemu"
	"github.com/hiercomm/hiercomm/topology"
)

// A job of emulated nodes in network namespaces, joined by 1gbit links
// (internal/netemu): every rank runs hiercomm.Init inside its node, with
// its sockets at its own NIC's address, and the "agree" role (init_test.go)
// checks the ranks, the topology and an exact AllReduce of rank-distinct
// int64 data. The nodes can reach each other only over the fabric's links,
// so the job forming at all shows that the wiring is right.
func TestInitOnAnEmulatedFabric(t *testing.T) {
	if err := netemu.Available(); err != nil {
		t.Skip(err)
	}
	layout := []int{2, 2}
	for _, tc := range []struct{ style, placement, network string }{
		{"torchrun", "block", "quic"},
		{"slurm", "cyclic", "tcp"},
		{"kubernetes", "block", "quic"},
	} {
		t.Run(tc.style, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			fab, err := netemu.Setup(ctx, netemu.Config{RanksPerNode: layout, Rate: "1gbit"})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := fab.Close(); err != nil {
					t.Error(err)
				}
			}()
			out := &lines{marker: "agree ok", ch: make(chan struct{}, 1)}
			dump := filepath.Join(t.TempDir(), "topo.json")
			job := startJob(t, ctx, cluster.LocalSpec{RanksPerNode: layout, Style: tc.style, Placement: tc.placement, Network: tc.network,
				Fabric: fab, Env: []string{launchenv.EnvTopoDumpFile + "=" + dump}}, "agree", out)
			if err := job.Wait(); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if out.count != 4 {
				t.Fatalf("%d of 4 ranks reported agreement\n%s", out.count, out)
			}
			f, err := os.Open(dump)
			if err != nil {
				t.Fatalf("rank 0 wrote no topology dump: %v", err)
			}
			defer f.Close()
			topo, err := topology.Load(f)
			if err != nil {
				t.Fatalf("the topology dump does not load: %v", err)
			}
			if topo.Size() != 4 || topo.NumNodes() != 2 {
				t.Errorf("the dump has %d ranks on %d nodes, want 4 on 2", topo.Size(), topo.NumNodes())
			}
			// agree checked that topology nodes and local ranks are the
			// emulated ones; each rank's data address is its NIC's.
			for _, m := range topo.Members() {
				host, _, err := net.SplitHostPort(m.Addr)
				if want := fab.Addr(topo.NodeOf(m.Rank), m.Local); err != nil || host != want {
					t.Errorf("rank %d (node %d, local %d) advertises %q, want an address on %s", m.Rank, topo.NodeOf(m.Rank), m.Local, m.Addr, want)
				}
			}
			t.Logf("%s\n%s", fab.Describe(), out)
		})
	}
	names, err := netemu.Namespaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range names {
		if strings.HasPrefix(ns, "hcnet-"+strconv.Itoa(os.Getpid())+"-") {
			t.Errorf("namespace %s is left after the jobs", ns)
		}
	}
}
