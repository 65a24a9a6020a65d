package cluster

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/hiercomm/hiercomm/internal/procgroup"
)

// LocalJob is a running local job.
type LocalJob struct {
	g     *procgroup.Group
	ranks []int // process index → the rank it was started as
}

// rankError names the rank of a process's failure.
func (j *LocalJob) rankError(err error) error {
	var pe *procgroup.ExitError
	if errors.As(err, &pe) {
		return &LocalExitError{Rank: j.ranks[pe.Index], err: pe}
	}
	return err
}

// LocalExitError is the failure of one process of a local job.
type LocalExitError struct {
	Rank int // the rank the process was started as
	err  *procgroup.ExitError
}

func (e *LocalExitError) Error() string { return e.err.Error() }
func (e *LocalExitError) Unwrap() error { return e.err }

// Pid is the process's pid.
func (e *LocalExitError) Pid() int { return e.err.Pid }

// ExitCode is the process's exit status (128+signal when a signal killed it).
func (e *LocalExitError) ExitCode() int { return e.err.ExitCode() }

// Wait waits for every process and returns the first failure, a
// *LocalExitError, or nil when every process exited 0.
func (j *LocalJob) Wait() error { return j.rankError(j.g.Wait()) }

// Errors waits for every process and returns each rank's failure (nil for
// a rank that exited 0), indexed by rank.
func (j *LocalJob) Errors() []error {
	byProc := j.g.Errors()
	errs := make([]error, len(byProc))
	for i, err := range byProc {
		errs[j.ranks[i]] = j.rankError(err)
	}
	return errs
}

// Kill sends SIGKILL to the process started as rank, for fault tests.
func (j *LocalJob) Kill(rank int) error {
	for i, r := range j.ranks {
		if r == rank {
			return j.g.Kill(i)
		}
	}
	return fmt.Errorf("cluster.LocalJob.Kill: no rank %d (world of %d)", rank, len(j.ranks))
}

// Signal sends sig to every process still running (and what it started).
// A process that exits by it counts as a failure (Grace, SIGTERM, ... for
// the others); Stop is the way to end a job.
func (j *LocalJob) Signal(sig syscall.Signal) { j.g.Signal(sig) }

// Stop ends the job the way a launcher that is itself told to stop does:
// sig (SIGTERM) to every process, SIGKILL to what is left KillAfter later.
// After Stop no exit hurries the others, not even one by sig of a process
// without a handler: every process that handles sig gets the whole
// KillAfter for its cleanup. Wait still returns the first failure.
func (j *LocalJob) Stop(sig syscall.Signal) { j.g.Stop(sig) }
