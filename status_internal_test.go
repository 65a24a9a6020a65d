package hiercomm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
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
