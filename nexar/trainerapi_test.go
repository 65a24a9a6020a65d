package nexar_test

// The API a trainer writes against, over a real communicator (an in-memory
// nexar world): comm's typed Start forms and comm.NewGroup. They live here
// because comm's own tests cannot import nexar.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar"
)

// onEveryRank runs fn on every rank of a new in-memory world of size p, one
// goroutine per rank, and fails t with each rank's error.
func onEveryRank(t *testing.T, p int, fn func(ctx context.Context, c comm.Communicator) error) {
	t.Helper()
	cs, err := nexar.NewMemoryWorld(p, nexar.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer nexar.CloseAll(cs)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	errs := make([]error, p)
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() { errs[r] = fn(ctx, c) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestStartForms starts one of every operation on every rank, all in flight
// at once, waits for them in reverse order, and checks every result against
// rank-distinct inputs.
func TestStartForms(t *testing.T) {
	for _, p := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("P=%d", p), func(t *testing.T) {
			onEveryRank(t, p, func(ctx context.Context, c comm.Communicator) error {
				return startEveryForm(ctx, c)
			})
		})
	}
}

// startEveryForm is TestStartForms on one rank. Rank r contributes
// 10·r + i at index i; the root of the rooted collectives is the last rank.
func startEveryForm(ctx context.Context, c comm.Communicator) error {
	r, p := c.Rank(), c.Size()
	root := p - 1
	val := func(rank, i int) int64 { return int64(10*rank + i) }
	mine := func(n int) []int64 {
		s := make([]int64, n)
		for i := range s {
			s[i] = val(r, i)
		}
		return s
	}
	const n = 3
	var (
		ar    = make([]int64, n)
		bc    = mine(n)
		red   = make([]int64, n)
		ag    = make([]int64, p*n)
		rs    = make([]int64, n)
		a2a   = make([]int64, p)
		a2av  = make([]int64, p*(r+1))
		ga    = make([]int64, p*n)
		sc    = make([]int64, n)
		scan  = make([]int64, n)
		exs   = make([]int64, n)
		recvd = make([]int64, n)
	)
	a2avSend := make([]int64, 0, p*(r+1))
	sendCounts, recvCounts := make([]int, p), make([]int, p)
	for j := range p {
		// Rank r sends rank j j+1 copies of val(r, j): rank j receives j+1
		// elements from every rank.
		for range j + 1 {
			a2avSend = append(a2avSend, val(r, j))
		}
		sendCounts[j], recvCounts[j] = j+1, r+1
	}
	scatterSend := comm.Buffer{}
	if r == root {
		scatterSend = comm.Host(mine(p * n))
	}
	next, prev := (r+1)%p, (r+p-1)%p
	work := []struct {
		name string
		w    *comm.Work
	}{
		{"AllReduce", comm.StartAllReduce(ctx, c, comm.Host(mine(n)), comm.Host(ar), comm.Sum)},
		{"Broadcast", comm.StartBroadcast(ctx, c, comm.Host(bc), root)},
		{"Reduce", comm.StartReduce(ctx, c, comm.Host(mine(n)), comm.Host(red), comm.Max, root)},
		{"AllGather", comm.StartAllGather(ctx, c, comm.Host(mine(n)), comm.Host(ag))},
		{"ReduceScatter", comm.StartReduceScatter(ctx, c, comm.Host(mine(p*n)), comm.Host(rs), comm.Sum)},
		{"AllToAll", comm.StartAllToAll(ctx, c, comm.Host(mine(p)), comm.Host(a2a))},
		{"AllToAllV", comm.StartAllToAllV(ctx, c, comm.Host(a2avSend), sendCounts, comm.Host(a2av), recvCounts)},
		{"Gather", comm.StartGather(ctx, c, comm.Host(mine(n)), comm.Host(ga), root)},
		{"Scatter", comm.StartScatter(ctx, c, scatterSend, comm.Host(sc), root)},
		{"Scan", comm.StartScan(ctx, c, comm.Host(mine(n)), comm.Host(scan), comm.Sum)},
		{"ExScan", comm.StartExScan(ctx, c, comm.Host(mine(n)), comm.Host(exs), comm.Sum)},
		{"Recv", comm.StartRecv(ctx, c, comm.Host(recvd), prev, 5)},
		{"Send", comm.StartSend(ctx, c, comm.Host(mine(n)), next, 5)},
		{"Barrier", comm.StartBarrier(ctx, c)},
	}
	for _, w := range slices.Backward(work) {
		if err := w.w.Wait(); err != nil {
			return fmt.Errorf("%s: %w", w.name, err)
		}
	}

	var errs []error
	check := func(name string, got []int64, want func(i int) int64) {
		for i, g := range got {
			if w := want(i); g != w {
				errs = append(errs, fmt.Errorf("%s: element %d is %d, want %d (all: %v)", name, i, g, w, got))
				return
			}
		}
	}
	sumOver := func(ranks int, i int) int64 {
		var s int64
		for q := range ranks {
			s += val(q, i)
		}
		return s
	}
	check("AllReduce", ar, func(i int) int64 { return sumOver(p, i) })
	check("Broadcast", bc, func(i int) int64 { return val(root, i) })
	if r == root {
		check("Reduce", red, func(i int) int64 { return val(p-1, i) })
		check("Gather", ga, func(i int) int64 { return val(i/n, i%n) })
	}
	check("AllGather", ag, func(i int) int64 { return val(i/n, i%n) })
	check("ReduceScatter", rs, func(i int) int64 { return sumOver(p, r*n+i) })
	check("AllToAll", a2a, func(i int) int64 { return val(i, r) })
	check("AllToAllV", a2av, func(i int) int64 { return val(i/(r+1), r) })
	check("Scatter", sc, func(i int) int64 { return val(root, r*n+i) })
	check("Scan", scan, func(i int) int64 { return sumOver(r+1, i) })
	check("ExScan", exs, func(i int) int64 { return sumOver(r, i) }) // rank 0: Sum's identity, 0
	check("Recv", recvd, func(i int) int64 { return val(prev, i) })
	return errors.Join(errs...)
}

// TestNewGroup makes groups of every shape on worlds of several sizes and
// checks that the members get a communicator whose rank i is the list's
// ranks[i], that the others get nil, and that the parent stays usable.
func TestNewGroup(t *testing.T) {
	for _, tc := range []struct {
		p     int
		ranks []int
	}{
		{1, []int{0}},
		{2, []int{1}},
		{2, []int{1, 0}},
		{3, []int{0, 2}},
		{4, []int{3, 1, 2}},
		{5, []int{4, 0}},
		{8, []int{7, 6, 5, 4, 3, 2, 1, 0}},
		{8, []int{2, 5, 3}},
	} {
		t.Run(fmt.Sprintf("P=%d%v", tc.p, tc.ranks), func(t *testing.T) {
			onEveryRank(t, tc.p, func(ctx context.Context, c comm.Communicator) error {
				g, err := comm.NewGroup(ctx, c, tc.ranks)
				if err != nil {
					return err
				}
				listed := slices.Index(tc.ranks, c.Rank())
				if listed < 0 {
					if g != nil {
						return fmt.Errorf("not listed, but got a communicator of %d ranks", g.Size())
					}
				} else {
					defer g.Close()
					if g.Rank() != listed || g.Size() != len(tc.ranks) {
						return fmt.Errorf("got rank %d of %d, want %d of %d", g.Rank(), g.Size(), listed, len(tc.ranks))
					}
					// Every member contributes its parent rank: the gathered
					// list is the one passed.
					got := make([]int32, g.Size())
					if err := g.AllGather(ctx, comm.Host([]int32{int32(c.Rank())}), comm.Host(got)); err != nil {
						return fmt.Errorf("AllGather on the group: %w", err)
					}
					for i, r := range got {
						if int(r) != tc.ranks[i] {
							return fmt.Errorf("the group's ranks are the parent's %v, want %v", got, tc.ranks)
						}
					}
				}
				return c.Barrier(ctx)
			})
		})
	}
}

// TestNewGroupBadList checks that a list wrong on its own is an *ArgError
// naming the problem on every rank, and that the parent stays usable.
func TestNewGroupBadList(t *testing.T) {
	for _, tc := range []struct {
		name, arg, problem string
		ranks              []int
	}{
		{"empty", "ranks", "empty", nil},
		{"out of range", "ranks[1]", "rank 3 is out of range [0, 3)", []int{0, 3}},
		{"negative", "ranks[0]", "rank -1 is out of range [0, 3)", []int{-1}},
		{"twice", "ranks[2]", "rank 0 is listed twice (also ranks[0])", []int{0, 2, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onEveryRank(t, 3, func(ctx context.Context, c comm.Communicator) error {
				g, err := comm.NewGroup(ctx, c, tc.ranks)
				var ae *comm.ArgError
				switch {
				case g != nil:
					return fmt.Errorf("got a group of %d ranks from a bad list", g.Size())
				case !errors.As(err, &ae) || !errors.Is(err, comm.ErrInvalidArgument):
					return fmt.Errorf("got %v, want an *ArgError", err)
				case ae.Arg != tc.arg || !strings.Contains(ae.Problem, tc.problem):
					return fmt.Errorf("the error names %s: %q, want %s: %q", ae.Arg, ae.Problem, tc.arg, tc.problem)
				}
				return c.Barrier(ctx)
			})
		})
	}
}

// TestNewGroupMismatch checks that ranks that pass different lists all get
// an error, none a group, and that the parent stays usable.
func TestNewGroupMismatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		p     int
		lists func(rank int) []int
	}{
		{"order", 2, func(r int) []int { return []int{r, 1 - r} }},
		{"one rank more", 3, func(r int) []int {
			if r == 2 {
				return []int{0, 1, 2}
			}
			return []int{0, 1}
		}},
		{"one rank bad", 4, func(r int) []int {
			if r == 1 {
				return []int{0, 9}
			}
			return []int{0, 1}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onEveryRank(t, tc.p, func(ctx context.Context, c comm.Communicator) error {
				list := tc.lists(c.Rank())
				g, err := comm.NewGroup(ctx, c, list)
				if g != nil {
					return fmt.Errorf("got a group of %d ranks from %v while the others passed other lists", g.Size(), list)
				}
				bad := errors.Is(err, comm.ErrInvalidArgument)
				if !errors.Is(err, comm.ErrMismatch) && !bad {
					return fmt.Errorf("got %v, want a mismatch (or this rank's *ArgError)", err)
				}
				if bad != slices.ContainsFunc(list, func(r int) bool { return r >= tc.p }) {
					return fmt.Errorf("got %v from %v", err, list)
				}
				// The parent is not aborted: it still runs collectives.
				x := []int32{1}
				if err := c.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); err != nil || x[0] != int32(tc.p) {
					return fmt.Errorf("the parent after the failed NewGroup: %v, %v", x, err)
				}
				return nil
			})
		})
	}
}
