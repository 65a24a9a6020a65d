package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

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
	if err := w.Barrier(ctx); err != nil {
		fmt.Println(err)
		return 1
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
