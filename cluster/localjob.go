package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/internal/procgroup"
)

// LocalJob is a running local job.
type LocalJob struct {
	g     *procgroup.Group
	ranks []int // process index → the rank it was started as, or replaced (LocalSpec.Replace)
	// Replacements (LocalSpec.Replace): the processes past the first
	// len(procs) replace failed ones; guarded by mu.
	mu       sync.Mutex
	procs    int   // the processes started at first
	nodes    []int // process index → its node
	replaced int   // replacements started
	// What a process that joins the running job needs (JoinerEnv).
	spec LocalSpec
	env  []string // the job's own variables: id, key, network
	seed *net.TCPAddr
}

// JoinerEnv is the environment of a process that joins the running job
// on emulated node node — one of the job's, or a new one after them —
// (HIERCOMM_JOIN=running: a replacement for a failed process, or an
// addition), to be started by the caller with the
// job's program: the job's id, key and network, the node's address to
// bind its own sockets on, the launcher variables of a process on that
// node (as its rank and local index 0: the grown world numbers it anew)
// and the seed. Not with a Fabric: its namespaces have
// no address for a process it was not set up for.
func (j *LocalJob) JoinerEnv(node int) ([]string, error) {
	if node < 0 || node >= maxLocalNodes {
		return nil, fmt.Errorf("cluster: JoinerEnv: node %d is not in [0, %d): the job's nodes are 0 to %d, and a new node is any after them", node, maxLocalNodes, len(j.spec.RanksPerNode)-1)
	}
	if j.spec.Fabric != nil {
		return nil, fmt.Errorf("cluster: JoinerEnv: a job in an emulated fabric has no address for a process that joins it")
	}
	p := localProc{node: node, ip: j.spec.nodeAddr(node)}
	env := append(os.Environ(), j.spec.Env...)
	env = append(env, j.env...)
	env = append(env, launchenv.EnvAddr+"="+p.ip, launchenv.EnvJoin+"=running")
	return append(env, j.spec.styleEnv(p, j.procs, j.seed)...), nil
}

// rankError names the rank of a process's failure.
func (j *LocalJob) rankError(err error) error {
	var pe *procgroup.ExitError
	if errors.As(err, &pe) {
		return &LocalExitError{Rank: j.rankOf(pe.Index), err: pe}
	}
	return err
}

// rankOf is the rank process i was started as, or replaced.
func (j *LocalJob) rankOf(i int) int {
	if i < j.procs {
		return j.ranks[i] // never changes
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ranks[i]
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
// a rank that exited 0), indexed by rank: the processes started at first
// (Replacements has the others').
func (j *LocalJob) Errors() []error {
	byProc := j.g.Errors()
	errs := make([]error, j.procs)
	for i, err := range byProc[:j.procs] {
		errs[j.ranks[i]] = j.rankError(err)
	}
	return errs
}

// LocalReplacement is a process started to replace a failed one
// (LocalSpec.Replace).
type LocalReplacement struct {
	Rank int   // the rank of the process it replaced (the one started as it, or its replacement)
	Node int   // where it ran
	Err  error // how it ended: nil for exit 0, else a *LocalExitError
}

// Replacements waits for every process and returns the replacements
// started, in order.
func (j *LocalJob) Replacements() []LocalReplacement {
	byProc := j.g.Errors()
	var rs []LocalReplacement
	for i := j.procs; i < len(byProc); i++ {
		j.mu.Lock()
		r := LocalReplacement{Rank: j.ranks[i], Node: j.nodes[i]}
		j.mu.Unlock()
		r.Err = j.rankError(byProc[i])
		rs = append(rs, r)
	}
	return rs
}

// replace starts a replacement for process i, which failed, unless
// LocalSpec.Replace replacements have been started already: a process on
// its node that joins the running job (JoinerEnv), as a rescheduled pod
// or a requeued Slurm task does.
func (j *LocalJob) replace(i int) {
	// Held while the replacement starts: its own exit (replace again)
	// waits until it is recorded.
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.replaced >= j.spec.Replace {
		return
	}
	j.replaced++
	rank, node := j.ranks[i], j.nodes[i]
	env, err := j.JoinerEnv(node)
	if err == nil {
		_, err = j.g.Add(procgroup.Proc{
			Path:   j.spec.Path,
			Args:   j.spec.Args,
			Env:    env,
			Prefix: fmt.Sprintf("[rank %d replacement] ", rank),
			Name:   fmt.Sprintf("rank %d's replacement", rank),
		})
	}
	if err == nil {
		j.ranks, j.nodes = append(j.ranks, rank), append(j.nodes, node)
	}
	if j.spec.Notify != nil {
		if err != nil {
			j.spec.Notify(fmt.Sprintf("rank %d failed; its replacement did not start: %v", rank, err))
		} else {
			j.spec.Notify(fmt.Sprintf("rank %d failed; a replacement joins the running job on node %d (%d of %d replacements)", rank, node, j.replaced, j.spec.Replace))
		}
	}
}

// Kill sends SIGKILL to the process started as rank, for fault tests.
func (j *LocalJob) Kill(rank int) error {
	for i, r := range j.ranks[:j.procs] {
		if r == rank {
			return j.g.Kill(i)
		}
	}
	return fmt.Errorf("cluster.LocalJob.Kill: no rank %d (world of %d)", rank, j.procs)
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
