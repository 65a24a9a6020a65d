package commtest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// GrownRank is what every process of a test that grows a communicator
// of members ranks to size checks on the result g (a tier's Grow, or a
// newcomer's Join), where want is the rank the rule gives this process
// (a member keeps its rank; newcomer i takes members + i): its rank and
// size, and that an AllGather of every process's name (a member's
// former rank, or -1-i for newcomer i: names no two processes share), in
// buffers of mem (nil: Go memory), finds each process at the rank the
// rule gives it. Run the suite on g after it.
func GrownRank(ctx context.Context, g comm.Communicator, members, size, want int, mem Memory) error {
	if g.Rank() != want || g.Size() != size {
		return fmt.Errorf("grown to rank %d of %d, want rank %d of %d", g.Rank(), g.Size(), want, size)
	}
	if mem == nil {
		mem = hostMemory{}
	}
	name := func(r int) int64 {
		if r >= members {
			return int64(-1 - (r - members))
		}
		return int64(r)
	}
	send, err := mem.Alloc(comm.I64, 1)
	if err != nil {
		return err
	}
	defer mem.Free(send)
	recv, err := mem.Alloc(comm.I64, size)
	if err != nil {
		return err
	}
	defer mem.Free(recv)
	if err := mem.Write(send, binary.LittleEndian.AppendUint64(nil, uint64(name(want)))); err != nil {
		return err
	}
	if err := g.AllGather(ctx, send, recv); err != nil {
		return fmt.Errorf("gathering the grown communicator's names: %w", err)
	}
	got := make([]byte, 8*size)
	if err := mem.Read(got, recv); err != nil {
		return err
	}
	all := make([]int64, size)
	for r := range all {
		all[r] = int64(binary.LittleEndian.Uint64(got[8*r:]))
	}
	for r, n := range all {
		if n != name(r) {
			return fmt.Errorf("the grown communicator holds %d at rank %d, want %d (its names: %v)", n, r, name(r), all)
		}
	}
	return nil
}

// RunGrow grows members (every rank of one communicator, comms[i] any
// rank) by newcomers processes and runs the suite on the result: grow(ctx,
// r) is process r's part, one goroutine each, a member's Grow for r below
// len(members) (r is its rank) and a newcomer's Join for the others (it
// takes rank r). It checks GrownRank on every process, that each member's
// communicator was closed by its Grow (a Barrier on it fails with
// comm.ErrClosed), and runs Run with opt on the grown communicators,
// which it closes at the end.
func RunGrow(t *testing.T, members []comm.Communicator, newcomers int, grow func(ctx context.Context, r int) (comm.Communicator, error), opt Options) {
	t.Helper()
	checkWorld(t, members)
	P, size := len(members), len(members)+newcomers
	grown := make([]comm.Communicator, size)
	defer func() {
		for _, g := range grown {
			if g != nil {
				g.Close()
			}
		}
	}()
	errs := make([]error, size)
	took := make([]time.Duration, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() {
			start := time.Now()
			errs[r] = growRank(t.Context(), r, grow, &grown[r])
			took[r] = time.Since(start)
			switch {
			case errs[r] == nil && grown[r] == nil:
				errs[r] = errors.New("grow returned neither a communicator nor an error")
			case errs[r] == nil:
				errs[r] = GrownRank(t.Context(), grown[r], P, size, r, opt.Memory)
			}
		})
	}
	wg.Wait()
	failed := false
	for r, err := range errs {
		if err != nil {
			t.Errorf("process %d: %v", r, err)
			failed = true
		}
	}
	if failed {
		return
	}
	t.Logf("grew %d ranks by %d: the slowest process's Grow or Join took %v", P, newcomers, slices.Max(took).Round(time.Millisecond))
	for _, c := range members {
		if err := c.Barrier(t.Context()); !errors.Is(err, comm.ErrClosed) {
			t.Errorf("rank %d: Barrier on the communicator grown out of: %v, want comm.ErrClosed", c.Rank(), err)
		}
	}
	Run(t, grown, opt)
}

// growRank is process r's grow, with its panic as an error.
func growRank(ctx context.Context, r int, grow func(ctx context.Context, r int) (comm.Communicator, error), g *comm.Communicator) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	c, err := grow(ctx, r)
	if err != nil {
		return err // c may be a typed nil
	}
	if c != nil && !reflect.ValueOf(c).IsNil() {
		*g = c
	}
	return nil
}

// RunGrowFailure runs grow, as RunGrow does, for a Grow that must fail
// (grow's newcomers that are not to come, or that die, return nil, nil):
// every member's error must contain want, and every newcomer's error
// wantNewcomer; a communicator that a process got all the same is
// closed, and fails t. It then runs Run with opt on members (a failed
// Grow leaves them usable), by default (nil Counts and DTypes) only f32
// and i64 at counts 1 and 7, with rank-distinct data.
func RunGrowFailure(t *testing.T, members []comm.Communicator, newcomers int, grow func(ctx context.Context, r int) (comm.Communicator, error), want, wantNewcomer string, opt Options) {
	t.Helper()
	checkWorld(t, members)
	P := len(members)
	errs := make([]error, P+newcomers)
	grown := make([]comm.Communicator, P+newcomers)
	var wg sync.WaitGroup
	for r := range errs {
		wg.Go(func() { errs[r] = growRank(t.Context(), r, grow, &grown[r]) })
	}
	wg.Wait()
	for r, err := range errs {
		w := want
		if r >= P {
			w = wantNewcomer
		}
		switch {
		case grown[r] != nil:
			grown[r].Close()
			t.Errorf("process %d: its part of the Grow succeeded, want an error naming %q", r, w)
		case err == nil && r < P:
			t.Errorf("process %d: no error, want one naming %q", r, w)
		case err == nil:
		case !strings.Contains(err.Error(), w):
			t.Errorf("process %d: %v\nwant an error naming %q", r, err, w)
		default:
			t.Logf("process %d: %v", r, err)
		}
	}
	if opt.Counts == nil {
		opt.Counts = []int{1, 7}
	}
	if opt.DTypes == nil {
		opt.DTypes = []comm.DType{comm.F32, comm.I64}
	}
	Run(t, members, opt)
}

// RunGrowMemberGone runs grow, as RunGrow does, with member gone gone
// before the Grow: instead of growing, its process runs die on its
// communicator (a Close, or a tier's way to stop as a dead process would)
// and never calls grow. Every other member's Grow must fail with an error
// that names rank gone, and every newcomer's Join must fail, each within
// within of the start (a bound of the tier's failure detection or its
// ConnectTimeout: no one may wait for the old communicator's Timeout); a
// communicator that a process got all the same is closed, and fails t.
// A Barrier on each member's communicator then fails too, naming rank
// gone, within within/2; the caller closes them.
func RunGrowMemberGone(t *testing.T, members []comm.Communicator, newcomers, gone int, die func(comm.Communicator) error,
	grow func(ctx context.Context, r int) (comm.Communicator, error), within time.Duration) {
	t.Helper()
	checkWorld(t, members)
	P := len(members)
	if gone < 0 || gone >= P {
		t.Fatalf("RunGrowMemberGone: member %d of %d", gone, P)
	}
	errs := make([]error, P+newcomers)
	took := make([]time.Duration, P+newcomers)
	grown := make([]comm.Communicator, P+newcomers)
	start := time.Now()
	var wg sync.WaitGroup
	for r := range errs {
		wg.Go(func() {
			defer func() { took[r] = time.Since(start) }()
			if r == gone {
				errs[r] = die(members[r])
				return
			}
			errs[r] = growRank(t.Context(), r, grow, &grown[r])
		})
	}
	wg.Wait()
	for r, err := range errs {
		switch {
		case r == gone:
			if err != nil {
				t.Errorf("process %d (gone): %v", r, err)
			}
		case grown[r] != nil:
			grown[r].Close()
			t.Errorf("process %d: its part of the Grow succeeded with member %d gone", r, gone)
		case err == nil:
			t.Errorf("process %d: no error, want one (member %d is gone)", r, gone)
		case r < P && !names(err, gone):
			t.Errorf("process %d: %v\nwant an error that names rank %d (comm.PeerOf %d, comm.CulpritOf %v)", r, err, gone, comm.PeerOf(err), culpritText(err))
		case took[r] > within:
			t.Errorf("process %d: its error came after %v, more than %v: %v", r, took[r].Round(time.Millisecond), within, err)
		default:
			t.Logf("process %d after %v: %v", r, took[r].Round(time.Millisecond), err)
		}
	}
	// The members' communicator lost a member: its next call fails
	// within the bound too, naming it.
	for r, c := range members {
		if r == gone {
			continue
		}
		ctx, cancel := context.WithTimeout(t.Context(), within)
		t0 := time.Now()
		err := c.Barrier(ctx)
		cancel()
		if err == nil || !names(err, gone) || time.Since(t0) > within/2 {
			t.Errorf("process %d: a Barrier on the communicator that lost member %d: %v after %v; want an error that names it within %v", r, gone, err, time.Since(t0).Round(time.Millisecond), within/2)
		}
	}
}
