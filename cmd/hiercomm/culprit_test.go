package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/internal/procgroup"
)

const (
	envFault  = "HIERCOMM_CMD_TEST_FAULT"  // the "fault" role's fault: error, panic, exit or late
	envFaulty = "HIERCOMM_CMD_TEST_FAULTY" // the rank that has it
)

// faultRole is a training loop as users write it (Init, AllReduce with a
// deadline until an error, Close deferred, the error printed on the way
// out, exit status 10 + its rank, so that the job's status says whose it
// is). In its fourth step rank faulty has the fault: its program returns
// an error ("error"; it cleans up for 1 s before it exits, so that the
// survivors exit first), panics ("panic"; Go's exit status 2), calls
// os.Exit(7) ("exit"), or sleeps 5 s past the others' deadline of 2 s
// ("late"), then goes on. Each rank's report says when its AllReduce
// failed and when it got to print the report (after Close).
func faultRole(fault, faulty string) int {
	deadline := 30 * time.Second
	if fault == "late" {
		deadline = 2 * time.Second
	}
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	var failedAt time.Time
	err := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		w, err := hiercomm.Init(ctx, hiercomm.Options{})
		if err != nil {
			return err
		}
		defer w.Close()
		x := make([]float32, 4096)
		for step := 0; ; step++ {
			if step == 3 && strconv.Itoa(w.Rank()) == faulty {
				switch fault {
				case "error":
					return fmt.Errorf("rank %d: the program's own error in step %d", w.Rank(), step)
				case "panic":
					panic(fmt.Sprintf("rank %d panics in step %d", w.Rank(), step))
				case "exit":
					fmt.Printf("rank %d exits with status 7 at %d\n", w.Rank(), time.Now().UnixNano())
					os.Exit(7)
				case "late":
					time.Sleep(5 * time.Second)
				}
			}
			sctx, cancel := context.WithTimeout(ctx, deadline)
			err := w.AllReduce(sctx, comm.Host(x), comm.Host(x), comm.Sum)
			cancel()
			if err != nil {
				failedAt = time.Now()
				return err
			}
		}
	}()
	who := "survivor"
	if strconv.Itoa(rank) == faulty {
		who = "faulty rank's"
		if fault == "error" {
			time.Sleep(time.Second) // its cleanup: the survivors exit first
		}
	}
	fmt.Printf("%s report (error at %d, report at %d): %v\n", who, failedAt.UnixNano(), time.Now().UnixNano(), err)
	return 10 + rank
}

// TestRunNamesTheCulprit: in a 2 × 2 job over QUIC, one rank fails in
// each of four ways while the others are in an AllReduce; whichever rank
// exits first, the summary names the faulty one (the survivors blame it
// in the status file) and hiercomm run exits with its status.
func TestRunNamesTheCulprit(t *testing.T) {
	for _, tc := range []struct {
		fault  string
		faulty int
		status int    // the faulty rank's
		how    string // the summary's words for it
		verb   string
	}{
		{"error", 1, 11, "exit status 11", "blamed it"},
		{"panic", 2, 2, "exit status 2", "blamed it"},
		{"exit", 3, 7, "exit status 7", "blamed it"},
		{"late", 3, 13, "exit status 13", "found it late"},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			t.Setenv(envRole, "fault")
			t.Setenv(envFault, tc.fault)
			t.Setenv(envFaulty, strconv.Itoa(tc.faulty))
			var out, errs procgroup.Buffer
			start := time.Now()
			code := run([]string{"--nodes", "2", "--ranks-per-node", "2", "--grace", "1m", "--", os.Args[0], "-test.run=^$"}, &out, &errs)
			all := out.String() + errs.String()
			if code != tc.status {
				t.Errorf("hiercomm run exited %d, want %d (rank %d's status)", code, tc.status, tc.faulty)
			}
			want := regexp.MustCompile(fmt.Sprintf(`(?m)^hiercomm run: rank %d failed first: %s \(pid \d+\); ranks? [0-9, and]+ %s \(rank \d: .+\); of the other 3 ranks, 3 failed and 0 exited 0; exit status %d$`,
				tc.faulty, tc.how, tc.verb, tc.status))
			if !want.MatchString(errs.String()) {
				t.Errorf("no summary naming rank %d (%s) and its status %d", tc.faulty, tc.verb, tc.status)
			}
			if m := regexp.MustCompile(`(?m)^hiercomm run: (rank \d+) \(pid \d+\)`).FindStringSubmatch(errs.String()); m != nil {
				t.Logf("%s exited first; the job took %v", m[1], time.Since(start).Round(time.Millisecond))
			}
			if t.Failed() {
				t.Log(all)
			}
		})
	}
}

// The culprit is the rank the first report blames; later reports that
// name it count as its accusers, and reports of ranks outside the world
// are ignored.
func TestFindCulprit(t *testing.T) {
	read := func(lines ...string) []hiercomm.StatusReport {
		var rs []hiercomm.StatusReport
		for _, l := range lines {
			r, err := hiercomm.ParseStatusReport(l)
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
		return rs
	}
	for _, tc := range []struct {
		lines []string
		want  blame
		ok    bool
	}{
		{nil, blame{}, false},
		{[]string{"0 failed 9 out of range", "9 failed 1 not a rank"}, blame{}, false},
		// A straggler that wakes to find the others gone blames one of
		// them, after they found it late.
		{[]string{"2 late 3 timed out", "0 late 1,3 timed out", "3 failed 0 it closed its communicator"},
			blame{rank: 3, late: true, by: []int{2, 0}, how: "timed out"}, true},
		{[]string{"0 failed 9 out of range", "1 failed 2 gone", "3 failed 2 gone", "2 failed 2 expelled"},
			blame{rank: 2, by: []int{1, 3, 2}, how: "gone"}, true},
	} {
		got, ok := findCulprit(read(tc.lines...), 4)
		if ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("findCulprit(%q) = %+v, %v; want %+v, %v", tc.lines, got, ok, tc.want, tc.ok)
		}
	}
}

// A job absorbed its failures when every rank that failed was shrunk past
// by a rank that exited 0 and every other rank exited 0; a report from a
// rank that failed itself, a failed rank nobody shrank past, or no rank
// left standing is a failed job.
func TestShrankPast(t *testing.T) {
	dead := errors.New("signal: killed")
	shrunk := func(rank int, gone ...int) hiercomm.StatusReport {
		return hiercomm.StatusReport{Rank: rank, Shrunk: true, Ranks: gone}
	}
	for _, tc := range []struct {
		name    string
		reports []hiercomm.StatusReport
		errs    []error
		want    string // "" for not absorbed
	}{
		{"one shrunk past", []hiercomm.StatusReport{{Rank: 0, Ranks: []int{1}}, shrunk(0, 1), shrunk(2, 1)}, []error{nil, dead, nil},
			"the job succeeded elastically: rank 1 ended (rank 1: signal: killed), and the other 2 ranks shrank past it and exited 0; exit status 0"},
		{"two shrunk past", []hiercomm.StatusReport{shrunk(0, 1), shrunk(2, 3)}, []error{nil, dead, nil, dead},
			"the job succeeded elastically: ranks 1 and 3 ended (rank 1: signal: killed; rank 3: signal: killed), and the other 2 ranks shrank past them and exited 0; exit status 0"},
		{"a failed rank not shrunk past", []hiercomm.StatusReport{shrunk(0, 1)}, []error{nil, dead, dead}, ""},
		{"shrunk past by a rank that failed", []hiercomm.StatusReport{shrunk(2, 1)}, []error{nil, dead, dead}, ""},
		{"no report", nil, []error{nil, dead}, ""},
		{"nobody left", []hiercomm.StatusReport{shrunk(0, 1)}, []error{dead, dead}, ""},
	} {
		line, ok := shrankPast(tc.reports, tc.errs)
		if ok != (tc.want != "") || line != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, line, ok, tc.want)
		}
	}
}
