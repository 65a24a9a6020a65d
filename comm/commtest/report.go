package commtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// maxLines bounds the failures an error lists.
const maxLines = 12

// report collects the failures of one suite on one rank.
type report struct {
	suite   string
	rank    int
	log     func(string, ...any)
	ran     int
	failed  int
	lines   []string
	stopped string
	cause   error         // the first error a call returned, for errors.Is
	own     time.Duration // spent building inputs and checking results
	timeout time.Duration // each case's bound (Options.Timeout)
	slowest string        // the case that took longest, and
	slow    time.Duration // how long it took
}

func newReport(suite string, rank int, o Options) *report {
	return &report{suite: suite, rank: rank, log: o.Log, timeout: o.Timeout}
}

// timed records that case name took d.
func (r *report) timed(name string, d time.Duration) {
	if d > r.slow {
		r.slowest, r.slow = name, d
	}
}

// margin says which case took longest and what share of its timeout that
// was, so a log shows how close a slow machine came to failing the suite.
func (r *report) margin() string {
	if r.slowest == "" {
		return ""
	}
	return fmt.Sprintf("; slowest %s: %v, %.0f%% of Options.Timeout", r.slowest,
		r.slow.Round(time.Millisecond), 100*r.slow.Seconds()/r.timeout.Seconds())
}

// fail records that case name went wrong on this rank.
func (r *report) fail(name, format string, args ...any) {
	r.failed++
	line := fmt.Sprintf("%s: rank %d: %s", name, r.rank, fmt.Sprintf(format, args...))
	r.log("commtest: %s", line)
	if len(r.lines) < maxLines {
		r.lines = append(r.lines, line)
	}
}

// callFailed records the error of a call and reports whether the run can go
// on: the communicator is still usable after a bad argument, here or on a
// peer; after anything else, the ranks may disagree on where they are.
func (r *report) callFailed(name string, err error) (goOn bool) {
	if r.cause == nil {
		r.cause = err
	}
	r.fail(name, "call failed: %v", err)
	return errors.Is(err, comm.ErrInvalidArgument) ||
		errors.Is(err, comm.ErrPeerAbandoned) && !errors.Is(err, comm.ErrTimeout) && !errors.Is(err, comm.ErrCanceled)
}

func (r *report) err() error {
	if r.failed == 0 && r.stopped == "" {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "commtest %s: rank %d: %d of %d cases failed", r.suite, r.rank, r.failed, r.ran)
	if r.stopped != "" {
		b.WriteString("; " + r.stopped)
	}
	for _, l := range r.lines {
		b.WriteString("\n\t" + l)
	}
	if r.failed > len(r.lines) {
		fmt.Fprintf(&b, "\n\t… and %d more", r.failed-len(r.lines))
	}
	return &suiteError{msg: b.String(), cause: r.cause}
}

// suiteError is the error of a suite: the report, and the first error a
// call returned (so errors.Is(err, comm.ErrTimeout) and the like work).
type suiteError struct {
	msg   string
	cause error
}

func (e *suiteError) Error() string { return e.msg }
func (e *suiteError) Unwrap() error { return e.cause }

// grace is how long the suite waits for an operation after its context
// ended before it calls it hung.
func grace(o Options) time.Duration { return min(max(o.Timeout/2, time.Second), 10*time.Second) }

// guard runs body on a report of its own and merges that into r. A
// Communicator must end every operation when its context does; if body has
// not returned by ctx's end plus grace, guard records that the operation
// hung and reports false (stop), leaving body running: the suite itself
// never hangs.
func guard(ctx context.Context, r *report, name string, o Options, body func(r *report) bool) bool {
	sub := &report{suite: r.suite, rank: r.rank, log: r.log}
	start := time.Now()
	defer func() { r.timed(name, time.Since(start)) }()
	var goOn bool
	var panicked any
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { panicked = recover() }()
		goOn = body(sub)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t := time.NewTimer(grace(o))
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			r.fail(name, "hung: still running %v after its context ended (Options.Timeout %v); a Communicator must end every operation when its context does",
				grace(o), o.Timeout)
			if r.cause == nil {
				r.cause = fmt.Errorf("%s: hung: %w", name, comm.ErrTimeout)
			}
			return false
		}
	}
	if panicked != nil {
		panic(panicked)
	}
	r.failed += sub.failed
	r.own += sub.own
	r.lines = append(r.lines, sub.lines[:min(len(sub.lines), maxLines-len(r.lines))]...)
	if r.cause == nil {
		r.cause = sub.cause
	}
	return goOn
}
