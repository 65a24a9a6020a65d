//go:build linux

package hiercomm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/internal/procgroup"
)

// With the log at TRACE, every call through the World writes one line
// when it ends: the call, how the World's communicator runs it (here a
// 2 × 2 hierarchy over shared memory and a world in memory: the leads'
// route for a small AllReduce, 2D for a large one, each with the parts'
// operations and their own routes), and its time; a started call when it
// completes. At DEBUG nothing is written.
func TestWorldTracesEveryCall(t *testing.T) {
	topo := twoByTwo(t, "trace")
	var out procgroup.Buffer
	trace := slog.New(newLineHandler(&out, LevelTrace))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	opt := Options{Hierarchy: hierarchyConfigForTrace()}.withDefaults(quiet)
	l := launchenv.Launch{JobID: fmt.Sprintf("trace-%d", os.Getpid()), Key: []byte("trace test key"), Intra: "shm"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws := make([]*World, topo.Size())
	for r, c := range composeAll(t, l, topo, opt) {
		log := quiet
		if r == 0 {
			log = trace
		}
		ws[r] = &World{Communicator: c, topo: topo, rank: r, log: log, tracing: tracing(log)}
	}
	errs := make([]error, topo.Size())
	var wg sync.WaitGroup
	if !ws[0].tracing || ws[1].tracing {
		t.Fatalf("tracing: rank 0 %v (TRACE), rank 1 %v (INFO); want true, false", ws[0].tracing, ws[1].tracing)
	}
	for r := range ws {
		wg.Go(func() {
			w := ws[r]
			small, large := make([]float32, 8), make([]float32, 1<<16)
			errs[r] = errors.Join(
				w.AllReduce(ctx, comm.Host(small), comm.Host(small), comm.Sum),
				w.AllReduce(ctx, comm.Host(large), comm.Host(large), comm.Sum),
				w.Start(ctx, comm.Call{Kind: comm.KindBroadcast, Send: comm.Host(small), Recv: comm.Host(small), Root: 1}).Wait(),
				w.Barrier(ctx))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []struct{ call, route string }{
		{`call="AllReduce(8×f32, sum)"`, `route="leads: node 0 shm Reduce (`},
		{`call="AllReduce(65536×f32, sum)"`, `route="2d: node 0 shm ReduceScatter (`},
		{`call="Broadcast(8×f32, root 1)"`, `route=`},
		{`call=Barrier()`, `route="through the parts: node 0 shm Barrier (`},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d trace lines, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], " TRACE hiercomm: call n="+fmt.Sprint(i+1)+" "+w.call) || !strings.Contains(lines[i], w.route) || !strings.Contains(lines[i], " took=") {
			t.Errorf("trace line %d: %s\nwant n=%d, %s, %s and took=", i+1, lines[i], i+1, w.call, w.route)
		}
	}
	if !strings.Contains(lines[1], "rail 0 AllReduce (") {
		t.Errorf("the 2D AllReduce's line names no rail operation with its route: %s", lines[1])
	}
	t.Logf("\n%s", out.String())
}

// hierarchyConfigForTrace pins the hierarchy's switch, so that the test's
// small and large AllReduces take the leads' and the 2D route whatever
// the cost model makes of this machine.
func hierarchyConfigForTrace() (cfg hierarchy.Config) {
	cfg.SmallBytes = 1 << 10
	return cfg
}
