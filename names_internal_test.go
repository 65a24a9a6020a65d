//go:build linux

package hiercomm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/internal/procgroup"
	"github.com/hiercomm/hiercomm/topology"
)

// A 2x2 hierarchy wired as Init wires it (shared memory within each node,
// or a split of the world with HIERCOMM_INTRA=nexar; a world in memory
// between the nodes): every part's flight recorder and log lines name the
// part as the hierarchy's errors do ("node 1 shm", "rail 1", "world"),
// and this process by its global rank first (rank=3 local=1), so that no
// two communicators of a rank read alike.
func TestPartsAreNamedAsTheHierarchyNamesThem(t *testing.T) {
	topo := twoByTwo(t, "host")
	for _, intra := range []string{"shm", "nexar"} {
		t.Run(intra, func(t *testing.T) {
			var out procgroup.Buffer
			hs := namesHierarchy(t, topo, intra, slog.New(slog.NewTextHandler(&out, nil)))
			tier.DumpLive("names test")
			line := regexp.MustCompile(`msg="flight recorder: the last collectives" comm=("[^"]*"|\S+) rank=(\d+)( local=\d+)?`)
			got := map[string][]string{} // by global rank: "comm[ local=…]"
			for _, m := range line.FindAllStringSubmatch(out.String(), -1) {
				got[m[2]] = append(got[m[2]], strings.Trim(m[1], `"`)+m[3])
			}
			for r := range 4 {
				node, local := r/2, r%2
				want := []string{"hierarchy", "world",
					fmt.Sprintf("node %d %s local=%d", node, intra, local),
					fmt.Sprintf("rail %d local=%d", local, node),
				}
				have := got[fmt.Sprint(r)]
				slices.Sort(have)
				slices.Sort(want)
				if !slices.Equal(have, want) {
					t.Errorf("rank %d's recorders name %q, want %q", r, have, want)
				}
			}
			if intra == "shm" {
				// An abort: shared memory's line on global rank 3 says so.
				hs[3].Abort(errors.New("names test abort"))
				if s := out.String(); !strings.Contains(s, `msg="shm: communicator aborted" comm="node 1 shm" rank=3 local=1`) {
					t.Errorf("no shm line names global rank 3 first")
				}
			}
			if t.Failed() {
				t.Logf("\n%s", out.String())
			}
		})
	}
}

// namesHierarchy builds the hierarchies of topo's ranks as Init does, with
// intra within the nodes and every recorder on, and runs an AllReduce on
// each, so that every recorder has something to show; they are closed when
// the test ends.
func namesHierarchy(t *testing.T, topo *topology.Topology, intra string, log *slog.Logger) []comm.Communicator {
	t.Helper()
	opt := Options{FlightRecorder: 4, FailureTimeout: 5 * time.Second}.withDefaults(log)
	l := launchenv.Launch{JobID: fmt.Sprintf("names-%d", os.Getpid()), Key: []byte("names test key"), Intra: intra}
	hs := composeAll(t, l, topo, opt)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, topo.Size())
	var wg sync.WaitGroup
	for r := range hs {
		wg.Go(func() {
			x := []float32{1, 2, 3}
			errs[r] = hs[r].AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return hs
}
