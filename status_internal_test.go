package hiercomm

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/nexar"
)

// Each kind of error a World's call returns makes the line the launcher
// reads, and the line reads back as the report it was written from.
func TestStatusReportOfAndItsLine(t *testing.T) {
	late := &comm.LateError{Err: comm.ErrTimeout, Ranks: []int{3, 5}, Last: []uint64{6, 7}, Seq: 8}
	for _, tc := range []struct {
		name string
		err  error
		line string // "" when nothing is written
	}{
		{"peer", &comm.OpError{Rank: 0, Peer: 2, Kind: comm.KindAllReduce, Seq: 4,
			Err: &comm.PeerError{Peer: 2, Err: errors.New("its process (pid 42) is\ngone")}}, "0 failed 2 its process (pid 42) is gone"},
		{"told", &comm.OpError{Rank: 0, Peer: 1, Kind: comm.KindAllReduce, Seq: 4,
			Err: tier.FailPeer.Blamed(1, comm.Blame{Rank: 2, How: "it closed its communicator"}, "")}, "0 failed 2 it closed its communicator"},
		{"aborted", &comm.AbortedError{Cause: &comm.PeerError{Peer: 0, Err: errors.New("gone")}}, "0 failed 0 gone"},
		{"late", &comm.OpError{Rank: 0, Peer: 3, Kind: comm.KindAllReduce, Seq: 8, Err: late}, "0 late 3,5 " + late.Error()},
		{"outside", tier.FromOutside(&comm.PeerError{Peer: 2, Err: errors.New("gone")}), ""},
		{"timeout", fmt.Errorf("rank 0: %w", comm.ErrTimeout), ""},
		{"abandoned", tier.FailTimeout.Remote(1, "timed out"), ""},
	} {
		r, ok := statusReportOf(0, tc.err)
		if !ok {
			if tc.line != "" {
				t.Errorf("%s: %v makes no line, want %q", tc.name, tc.err, tc.line)
			}
			continue
		}
		if tc.line == "" || r.String() != tc.line {
			t.Errorf("%s: %v makes the line %q, want %q", tc.name, tc.err, r.String(), tc.line)
			continue
		}
		back, err := ParseStatusReport(r.String())
		r.How = strings.Join(strings.Fields(r.How), " ")
		if err != nil || !reflect.DeepEqual(back, r) {
			t.Errorf("%s: %q reads back as %+v, %v; want %+v", tc.name, r.String(), back, err, r)
		}
	}
}

func TestParseStatusReportRejectsBadLines(t *testing.T) {
	for _, line := range []string{"", "0 failed", "x failed 1 how", "-1 failed 1", "0 blamed 1 how",
		"0 failed 1,2 how", "0 late 1,,2 how", "0 failed -2 how"} {
		if r, err := ParseStatusReport(line); err == nil {
			t.Errorf("ParseStatusReport(%q) = %+v, want an error", line, r)
		}
	}
	if r, err := ParseStatusReport("4 failed 1"); err != nil || r.Rank != 4 || r.Ranks[0] != 1 || r.How != "" {
		t.Errorf("a line without words: %+v, %v", r, err)
	}
	shrunk := StatusReport{Rank: 2, Shrunk: true, Ranks: []int{1, 3}, How: "shrank from 4 ranks to 2"}
	if line := shrunk.String(); line != "2 shrunk 1,3 shrank from 4 ranks to 2" {
		t.Errorf("a Shrink's line: %q", line)
	}
	if r, err := ParseStatusReport(shrunk.String()); err != nil || !reflect.DeepEqual(r, shrunk) {
		t.Errorf("a Shrink's line reads back as %+v, %v; want %+v", r, err, shrunk)
	}
}

// A World made by Shrink numbers its ranks anew; its Shrink's line names
// the ranks the launcher started (launchedRank), not the shrunk World's.
func TestReportShrinkNamesLaunchedRanks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvStatusFile, path)
	statusPath = sync.OnceValue(func() string { return os.Getenv(EnvStatusFile) })
	t.Cleanup(func() { statusPath = sync.OnceValue(func() string { return os.Getenv(EnvStatusFile) }) })
	cs, err := nexar.NewMemoryWorld(4, nexar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nexar.CloseAll(cs)
	// Launched ranks 0, 2, 3, 5 (1 and 4 already gone) are this World's
	// 0 to 3; a Shrink keeps its ranks 1 and 3: launched 2 and 5.
	w := &World{Communicator: cs[1], rank: 1, launched: []int{0, 2, 3, 5}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	two, err := nexar.NewMemoryWorld(2, nexar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer nexar.CloseAll(two)
	nw := &World{Communicator: two[0], launched: []int{2, 5}}
	w.reportShrink(nw)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "2 shrunk 0,3 shrank from 4 ranks to 2\n"; string(b) != want {
		t.Errorf("the status file reads %q, want %q", b, want)
	}
}

// appendStatus adds lines to the launcher's file, and fails on a file
// the launcher did not make.
func TestAppendStatus(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status")
	if err := appendStatus(path, StatusReport{Rank: 1, Ranks: []int{2}}); err == nil {
		t.Errorf("appendStatus made a status file the launcher had not made")
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, r := range []StatusReport{{Rank: 1, Ranks: []int{2}, How: "gone"}, {Rank: 0, Late: true, Ranks: []int{3}, How: "timed out"}} {
		if err := appendStatus(path, r); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if want := "1 failed 2 gone\n0 late 3 timed out\n"; err != nil || string(b) != want {
		t.Errorf("the status file holds %q, %v; want %q", b, err, want)
	}
}
