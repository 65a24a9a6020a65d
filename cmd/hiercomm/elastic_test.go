package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/internal/procgroup"
)

// elasticRole is an elastic trainer: it joins, and rank 1 kills itself
// (SIGKILL) after a Barrier while the others run AllReduces; they shrink
// past it, work 2 s on (longer than the test's --grace), check an
// AllReduce of the survivors, and exit 0.
func elasticRole() int {
	ctx, w, done, ok := roleWorld()
	if !ok {
		return 1
	}
	defer done()
	s, ok := loseRankOne(ctx, w)
	if !ok {
		return 1
	}
	defer s.Close()
	time.Sleep(2 * time.Second) // training on, past the launcher's grace
	y := []int32{int32(w.Rank())}
	if err := s.AllReduce(ctx, comm.Host(y), comm.Host(y), comm.Sum); err != nil {
		fmt.Println("after the shrink:", err)
		return 1
	}
	if y[0] != 0+2+3 {
		fmt.Printf("after the shrink the survivors' ranks sum to %d, want 5\n", y[0])
		return 1
	}
	fmt.Println("elastic ok")
	return 0
}

// TestRunElastic: with --elastic, rank 1's death does not stop the others;
// they shrink past it, train on longer than --grace, exit 0, and hiercomm
// run exits 0, saying which rank ended and that the others shrank past it
// (before, a job that absorbed its failure exited with the dead rank's
// status). Without --elastic the launcher stops the survivors after
// --grace, as for any failure, and the job fails.
func TestRunElastic(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	t.Setenv(envRole, "elastic")
	var out, errs procgroup.Buffer
	code := run([]string{"--elastic", "--grace", "1s", "--nodes", "2", "--ranks-per-node", "2", "--", os.Args[0], "-test.run=^$"}, &out, &errs)
	want := regexp.MustCompile(`(?m)^hiercomm run: the job succeeded elastically: rank 1 ended \(rank 1: killed by SIGKILL \(pid \d+\)\), and the other 3 ranks shrank past it and exited 0; exit status 0$`)
	if code != 0 || !want.MatchString(errs.String()) || strings.Count(out.String(), "elastic ok") != 3 {
		t.Errorf("hiercomm run --elastic exited %d; want 0, three survivors ok and the summary\n%s%s", code, out.String(), errs.String())
	}
	var out2, errs2 procgroup.Buffer
	code = run([]string{"--grace", "1s", "--nodes", "2", "--ranks-per-node", "2", "--", os.Args[0], "-test.run=^$"}, &out2, &errs2)
	if code == 0 || strings.Contains(errs2.String(), "succeeded elastically") {
		t.Errorf("hiercomm run without --elastic exited %d; want the job stopped after --grace and failed\n%s%s", code, out2.String(), errs2.String())
	}
}

// replaceRole: rank 1 kills itself after a Barrier; the survivors shrink
// past it and Grow until the replacement the launcher starts
// (--replace-failed) is admitted; every rank of the grown World,
// replacement included (its Init returns it, Generation 1), checks an
// AllReduce of the four ranks and exits 0.
func replaceRole() int {
	ctx, w, done, ok := roleWorld()
	if !ok {
		return 1
	}
	defer done()
	g := w
	if w.Generation() == 0 {
		s, ok := loseRankOne(ctx, w)
		if !ok {
			return 1
		}
		sw := s.(*hiercomm.World)
		var err error
		defer sw.Close()
		for g = sw; g == sw; time.Sleep(50 * time.Millisecond) {
			if g, err = sw.Grow(ctx, 0); err != nil {
				fmt.Println("grow:", err)
				return 1
			}
		}
		defer g.Close()
	}
	y := []int32{int32(g.Rank())}
	if err := g.AllReduce(ctx, comm.Host(y), comm.Host(y), comm.Sum); err != nil {
		fmt.Println("after the grow:", err)
		return 1
	}
	if g.Size() != 4 || y[0] != 0+1+2+3 {
		fmt.Printf("after the grow: %d ranks whose ranks sum to %d, want 4 and 6\n", g.Size(), y[0])
		return 1
	}
	fmt.Printf("replace ok: rank %d of %d, generation %d\n", g.Rank(), g.Size(), g.Generation())
	return 0
}

// TestRunReplacesFailed: with --elastic --replace-failed 1, the launcher
// replaces rank 1, killed, by a process on its node that joins the
// running job; the survivors shrink past rank 1, Grow, and the four
// ranks of the grown World (the replacement last) check an AllReduce;
// hiercomm run exits 0 and says that rank 1 was replaced.
func TestRunReplacesFailed(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	t.Setenv(envRole, "replace")
	var out, errs procgroup.Buffer
	code := run([]string{"--elastic", "--replace-failed", "1", "--nodes", "2", "--ranks-per-node", "2", "--", os.Args[0], "-test.run=^$"}, &out, &errs)
	want := regexp.MustCompile(`(?m)^hiercomm run: the job succeeded elastically: rank 1 ended \(rank 1: killed by SIGKILL \(pid \d+\)\), and the other 3 ranks shrank past it and exited 0; rank 1 replaced by a process that joined the running job and exited 0; exit status 0$`)
	if code != 0 || !want.MatchString(errs.String()) || strings.Count(out.String(), "replace ok: rank") != 4 ||
		!strings.Contains(out.String(), "[rank 1 replacement] replace ok: rank 3 of 4, generation 1") ||
		!strings.Contains(errs.String(), "hiercomm run: rank 1 failed; a replacement joins the running job on node 0 (1 of 1 replacements)") {
		t.Errorf("hiercomm run --elastic --replace-failed 1 exited %d; want 0, four ranks ok, the replacement last, and the summary\n%s%s", code, out.String(), errs.String())
	}
	if code := run([]string{"--replace-failed", "1", "--", os.Args[0]}, &out, &errs); code != 2 {
		t.Errorf("--replace-failed without --elastic: exit %d, want 2", code)
	}
}

// loseRankOne has rank 1 kill itself (SIGKILL) after a Barrier while the
// others run AllReduces until one fails; they Shrink past it, and get
// the shrunk World.
func loseRankOne(ctx context.Context, w *hiercomm.World) (comm.Communicator, bool) {
	if err := w.Barrier(ctx); err != nil {
		fmt.Println(err)
		return nil, false
	}
	if w.Rank() == 1 {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	x := make([]float32, 1<<10)
	for w.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum) == nil {
	}
	s, err := w.Shrink(ctx)
	if err != nil {
		fmt.Println("shrink:", err)
		return nil, false
	}
	return s, true
}
