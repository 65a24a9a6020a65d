package commtest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// Run runs RunRank on every rank of an in-process world (comms[i] is any
// rank; together they must be ranks 0…len-1 of one communicator), one
// goroutine per rank, as one subtest per Kind ("Run/AllReduce", …), and
// fails t with every rank's report. Filtering subtests with -run is safe:
// a group is skipped on every rank alike.
func Run(t *testing.T, comms []comm.Communicator, opt Options) {
	t.Helper()
	checkWorld(t, comms)
	o := opt.withDefaults()
	if err := o.check(); err != nil {
		t.Fatal(err)
	}
	cases := buildCases(o, len(comms))
	for len(cases) > 0 {
		n := 1
		for n < len(cases) && cases[n].kind == cases[0].kind {
			n++
		}
		group := cases[:n]
		cases = cases[n:]
		name := group[0].kind.String()
		if group[0].kind == comm.KindSend {
			name = "SendRecv"
		}
		t.Run(name, func(t *testing.T) {
			o := o
			if opt.Log == nil {
				o.Log = t.Logf
			}
			runWorld(t, comms, func(ctx context.Context, c comm.Communicator) error {
				return runCases(ctx, c, group, o, "Run/"+name)
			})
		})
	}
}

// runWorld runs fn on every rank in its own goroutine, waits for all of
// them, and fails t with each rank's error.
func runWorld(t *testing.T, comms []comm.Communicator, fn func(ctx context.Context, c comm.Communicator) error) {
	t.Helper()
	for i, err := range forEachRank(t.Context(), comms, fn) {
		if err != nil {
			t.Errorf("rank %d: %v", comms[i].Rank(), err)
		}
	}
}

// forEachRank runs fn on every communicator in its own goroutine and returns
// their errors, in the order of comms. A panic in fn is returned as an error
// (a panic is a bug of the suite or the communicator, and must not hide the
// other ranks' reports).
func forEachRank(ctx context.Context, comms []comm.Communicator, fn func(ctx context.Context, c comm.Communicator) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					errs[i] = fmt.Errorf("panic: %v", p)
				}
			}()
			errs[i] = fn(ctx, c)
		})
	}
	wg.Wait()
	return errs
}

// checkWorld fails t unless comms are the ranks 0…len-1 of one world.
func checkWorld(t *testing.T, comms []comm.Communicator) {
	t.Helper()
	if len(comms) == 0 {
		t.Fatal("commtest: no communicators")
	}
	seen := make([]bool, len(comms))
	for i, c := range comms {
		if c == nil {
			t.Fatalf("commtest: comms[%d] is nil", i)
		}
		if c.Size() != len(comms) {
			t.Fatalf("commtest: comms[%d].Size() = %d, but there are %d communicators", i, c.Size(), len(comms))
		}
		r := c.Rank()
		if r < 0 || r >= len(comms) || seen[r] {
			t.Fatalf("commtest: comms[%d].Rank() = %d: the ranks must be 0…%d, each once", i, r, len(comms)-1)
		}
		seen[r] = true
	}
}
