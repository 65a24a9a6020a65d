package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/cluster"
)

// The rank that exits first is often not the one that failed: a rank that
// returned an error lingers in Close while the survivors it left report
// and exit, a straggler sleeps on while the others' deadline passes. The
// ranks know better: each writes, at its first error that blames another
// rank, one line to the status file (hiercomm.StatusReport), and the
// summary names the rank the first line blames.

// statusFile makes the empty status file the ranks append to.
func statusFile() (string, error) {
	f, err := os.CreateTemp("", "hiercomm-status-")
	if err != nil {
		return "", fmt.Errorf("making the status file for the ranks' reports: %w", err)
	}
	return f.Name(), f.Close()
}

// readStatus reads the ranks' reports, in the order they were written,
// and what was wrong with the lines it could not read.
func readStatus(path string) (reports []hiercomm.StatusReport, bad []error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, []error{fmt.Errorf("reading the ranks' status file: %w", err)}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		r, err := hiercomm.ParseStatusReport(sc.Text())
		if err != nil {
			bad = append(bad, err)
			continue
		}
		reports = append(reports, r)
	}
	if err := sc.Err(); err != nil {
		bad = append(bad, fmt.Errorf("reading the ranks' status file %s: %w", path, err))
	}
	return reports, bad
}

// blame is the culprit the reports name: the rank the first report of a
// world of size blames (its first late rank, for a deadline), the ranks
// whose reports name it (by, in order), and what the first said (how).
type blame struct {
	rank int
	late bool
	by   []int
	how  string
}

// findCulprit picks the culprit: the rank the first report blames, the
// earliest failure any rank attributed to another (a rank that a failure
// brought down blames it only later, if at all: a straggler that wakes to
// find the others gone). ok is false when no report names a rank of the
// world.
func findCulprit(reports []hiercomm.StatusReport, size int) (b blame, ok bool) {
	valid := func(r int) bool { return r >= 0 && r < size }
	for _, r := range reports {
		if r.Shrunk || !valid(r.Rank) || !valid(r.Ranks[0]) {
			continue
		}
		if !ok {
			b, ok = blame{rank: r.Ranks[0], late: r.Late, how: r.How}, true
		}
		if slices.Contains(r.Ranks, b.rank) && !slices.Contains(b.by, r.Rank) {
			b.by = append(b.by, r.Rank)
		}
	}
	return b, ok
}

// culpritSummary is the one line that ends a failed job whose culprit b
// the reports named, and the exit status: the culprit's, or, where it
// exited 0, that of first, the first rank to end with an error.
func culpritSummary(b blame, first *cluster.LocalExitError, errs []error) (string, int) {
	how, code := "exited 0", first.ExitCode()
	if err := errs[b.rank]; err != nil {
		how, code = exitStatus(err), 1
		var ee *cluster.LocalExitError
		if errors.As(err, &ee) {
			how, code = fmt.Sprintf("%s (pid %d)", how, ee.Pid()), ee.ExitCode()
		}
	}
	verb := "blamed it"
	if b.late {
		verb = "found it late"
	}
	failed, clean := others(errs, b.rank)
	line := fmt.Sprintf("rank %d failed first: %s; %s %s (rank %d: %s); of the other %d ranks, %d failed and %d exited 0; exit status %d",
		b.rank, how, ranks(slices.Sorted(slices.Values(b.by))), verb, b.by[0], b.how, len(errs)-1, failed, clean, code)
	if errs[b.rank] == nil {
		line += fmt.Sprintf(" (rank %d's, the first to end with an error)", first.Rank)
	}
	return line, code
}

// shrankPast reports whether a job whose ranks ended with errs absorbed
// its failures: every rank that failed was shrunk past (a Shrink report
// names it) by ranks that exited 0, and every other rank exited 0. gone
// are the ranks that failed; the line says so.
func shrankPast(reports []hiercomm.StatusReport, errs []error) (line string, ok bool) {
	past := make(map[int]bool)
	for _, r := range reports {
		if r.Shrunk && r.Rank >= 0 && r.Rank < len(errs) && errs[r.Rank] == nil {
			for _, g := range r.Ranks {
				past[g] = true
			}
		}
	}
	var gone []int
	var how []string
	clean := 0
	for r, err := range errs {
		switch {
		case err == nil:
			clean++
		case !past[r]:
			return "", false
		default:
			gone = append(gone, r)
			var ee *cluster.LocalExitError
			if errors.As(err, &ee) {
				how = append(how, fmt.Sprintf("rank %d: %s (pid %d)", r, exitStatus(err), ee.Pid()))
			} else {
				how = append(how, fmt.Sprintf("rank %d: %s", r, exitStatus(err)))
			}
		}
	}
	if len(gone) == 0 || clean == 0 {
		return "", false
	}
	them := "it"
	if len(gone) > 1 {
		them = "them"
	}
	return fmt.Sprintf("the job succeeded elastically: %s ended (%s), and the other %d ranks shrank past %s and exited 0; exit status 0",
		ranks(gone), strings.Join(how, "; "), clean, them), true
}

// replacementFailed is the line and exit status of a job whose
// replacements (hiercomm run --replace-failed) did not all exit 0: the
// first that failed.
func replacementFailed(reps []cluster.LocalReplacement) (line string, code int, failed bool) {
	for _, r := range reps {
		var ee *cluster.LocalExitError
		if r.Err != nil && errors.As(r.Err, &ee) {
			return fmt.Sprintf("rank %d's replacement (node %d) failed: %s (pid %d); exit status %d", r.Rank, r.Node, exitStatus(r.Err), ee.Pid(), ee.ExitCode()), ee.ExitCode(), true
		}
	}
	return "", 0, false
}

// replaced says, after the line of a job that succeeded elastically,
// which ranks were replaced (nothing when none was).
func replaced(reps []cluster.LocalReplacement) string {
	if len(reps) == 0 {
		return ""
	}
	var rs []int
	for _, r := range reps {
		rs = append(rs, r.Rank)
	}
	what := "a process"
	if len(reps) > 1 {
		what = fmt.Sprintf("%d processes", len(reps))
	}
	return fmt.Sprintf("; %s replaced by %s that joined the running job and exited 0", ranks(rs), what)
}

// others counts the ranks but rank that failed and that exited 0.
func others(errs []error, rank int) (failed, clean int) {
	for r, err := range errs {
		switch {
		case r == rank:
		case err == nil:
			clean++
		default:
			failed++
		}
	}
	return failed, clean
}

// ranks names a list of ranks: "rank 0", "ranks 0 and 2", "ranks 0, 2
// and 3".
func ranks(rs []int) string {
	if len(rs) == 1 {
		return "rank " + strconv.Itoa(rs[0])
	}
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return "ranks " + strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
