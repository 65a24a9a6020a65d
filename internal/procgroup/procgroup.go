// Package procgroup runs the processes of a local job: start them, copy
// their output line by line with a prefix naming each, and when one fails,
// kill the rest. Both local launchers (nexar's single-host test worlds and
// the cluster layer's emulated nodes) use it. It imports the standard
// library only and knows nothing of ranks' meaning, sockets or collectives.
package procgroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc describes one process of a group.
type Proc struct {
	// Path is the program, Args its arguments (without the program name).
	Path string
	Args []string
	// Env is the complete environment of the process (nil: this
	// process's). Unless it sets GOMAXPROCS, the process gets its share of
	// this host's CPUs (CPUShare): Go programs default to every CPU each,
	// and several on one host then keep idle threads spinning for work on
	// the cores the others need (the reason torchrun sets
	// OMP_NUM_THREADS=1).
	Env []string
	// Files become the child's file descriptors 3, 4, ... (exec.Cmd's
	// ExtraFiles). The group does not close them; the caller may close its
	// copies once Start returns.
	Files []*os.File
	// Prefix is written before every line of the process's output.
	Prefix string
	// Name names the process in its ExitError ("rank 3"). If empty, the
	// error names only its pid.
	Name string
}

// Spec describes a group.
type Spec struct {
	Procs []Proc
	// Stdout and Stderr receive the processes' output, one whole prefixed
	// line at a time. If nil, default to os.Stdout and os.Stderr.
	Stdout, Stderr io.Writer
	// KeepOthers, for fault tests, lets the others run on when one fails
	// (by default they are killed).
	KeepOthers bool
}

// CPUShare is the GOMAXPROCS of each of n processes sharing this host's
// CPUs (as the scheduler lets this process use them): NumCPU/n, at least 1.
func CPUShare(n int) int {
	return max(1, runtime.NumCPU()/max(1, n))
}

// withCPUShare is env (nil: this process's) with GOMAXPROCS set to the
// share of each of n processes, and HIERCOMM_HOST_PROCS (cluster's
// EnvHostProcs) to n, unless env sets them: a rank's cost model learns
// from it how many processes share the host's cores.
func withCPUShare(env []string, n int) []string {
	if env == nil {
		env = os.Environ()
	}
	out := env[:len(env):len(env)]
	for _, v := range []struct{ name, value string }{
		{"GOMAXPROCS", strconv.Itoa(CPUShare(n))},
		{"HIERCOMM_HOST_PROCS", strconv.Itoa(n)},
	} {
		if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, v.name+"=") }) {
			out = append(out, v.name+"="+v.value)
		}
	}
	return out
}

// Group is a running group of processes.
type Group struct {
	keep  bool
	procs []*exec.Cmd
	names []string      // Proc.Name of each
	done  chan struct{} // closed when every process has exited

	mu    sync.Mutex // guards errs and first
	errs  []error    // per process
	first int        // index of the first process that failed, or -1
}

// Start starts every process of spec. A process that fails to start kills
// the ones already started. The processes die with ctx, and with this
// process (Linux parent-death signal).
func Start(ctx context.Context, spec Spec) (*Group, error) {
	if len(spec.Procs) == 0 {
		return nil, errors.New("procgroup: no processes to start")
	}
	if spec.Stdout == nil {
		spec.Stdout = os.Stdout
	}
	if spec.Stderr == nil {
		spec.Stderr = os.Stderr
	}
	g := &Group{keep: spec.KeepOthers, done: make(chan struct{}), first: -1, errs: make([]error, len(spec.Procs))}
	outMu := new(sync.Mutex) // one line at a time across all processes
	for _, p := range spec.Procs {
		cmd := exec.CommandContext(ctx, p.Path, p.Args...)
		cmd.Env = withCPUShare(p.Env, len(spec.Procs))
		cmd.ExtraFiles = p.Files
		// Each process leads its own process group, so that stopping it
		// stops what it started too (a shell's children, a helper that
		// holds its output open).
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		// exec copies the output; once the process has exited, Wait waits
		// at most this long for whatever else still holds it open.
		cmd.WaitDelay = 5 * time.Second
		cmd.Stdout = &lineWriter{prefix: p.Prefix, out: spec.Stdout, mu: outMu}
		cmd.Stderr = &lineWriter{prefix: p.Prefix, out: spec.Stderr, mu: outMu}
		if err := cmd.Start(); err != nil {
			g.KillAll()
			return nil, fmt.Errorf("procgroup: starting %s%s: %w", p.Prefix, p.Path, err)
		}
		g.procs = append(g.procs, cmd)
		g.names = append(g.names, p.Name)
	}
	go g.watch()
	return g, nil
}

// lineWriter writes whole lines, each prefixed, to out; a last line
// without a newline is written by flush.
type lineWriter struct {
	prefix string
	out    io.Writer
	mu     *sync.Mutex // shared by every lineWriter of the group
	buf    []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 1<<20 { // a line over 1 MiB goes out in pieces
		w.emit(w.buf)
		w.buf = nil
	}
	return len(p), nil
}

func (w *lineWriter) emit(line []byte) {
	w.mu.Lock()
	fmt.Fprintf(w.out, "%s%s\n", w.prefix, line)
	w.mu.Unlock()
}

func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.emit(w.buf)
		w.buf = nil
	}
}

// watch waits for every process; the first failure kills the rest.
func (g *Group) watch() {
	var wg sync.WaitGroup
	for i, cmd := range g.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := cmd.Wait()
			cmd.Stdout.(*lineWriter).flush()
			cmd.Stderr.(*lineWriter).flush()
			if err != nil {
				g.mu.Lock()
				g.errs[i] = &ExitError{Index: i, Name: g.names[i], Pid: cmd.Process.Pid, Err: err}
				if g.first < 0 {
					g.first = i
				}
				g.mu.Unlock()
				if !g.keep {
					g.KillAll()
				}
			}
		}()
	}
	wg.Wait()
	close(g.done)
}

// ExitError is the failure of one process of a group.
type ExitError struct {
	Index int    // position in Spec.Procs
	Name  string // Proc.Name
	Pid   int
	Err   error // from exec.Cmd.Wait; an *exec.ExitError when the process ran
}

func (e *ExitError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("pid %d: %v", e.Pid, e.Err)
	}
	return fmt.Sprintf("%s (pid %d): %v", e.Name, e.Pid, e.Err)
}
func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode is the process's exit status, 128+signal when a signal killed
// it (the shell's convention), or 1 when it did not run.
func (e *ExitError) ExitCode() int {
	var ee *exec.ExitError
	if !errors.As(e.Err, &ee) {
		return 1
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if c := ee.ExitCode(); c > 0 {
		return c
	}
	return 1
}

// Wait waits for every process and returns the first failure, an
// *ExitError, or nil when every process exited 0.
func (g *Group) Wait() error {
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.first < 0 {
		return nil
	}
	return g.errs[g.first]
}

// Errors waits for every process and returns each one's failure (nil for
// a process that exited 0).
func (g *Group) Errors() []error {
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]error(nil), g.errs...)
}

// Len is the number of processes.
func (g *Group) Len() int { return len(g.procs) }

// Pid is process i's pid.
func (g *Group) Pid(i int) int { return g.procs[i].Process.Pid }

// Kill sends SIGKILL to process i and its process group, for fault tests.
func (g *Group) Kill(i int) error {
	if i < 0 || i >= len(g.procs) {
		return fmt.Errorf("procgroup: process %d out of range [0, %d)", i, len(g.procs))
	}
	return syscall.Kill(-g.procs[i].Process.Pid, syscall.SIGKILL)
}

// Signal sends sig to every process still running and to what it started
// (its process group); a launcher forwards SIGINT and SIGTERM this way.
func (g *Group) Signal(sig syscall.Signal) {
	for _, cmd := range g.procs {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, sig)
		}
	}
}

// KillAll sends SIGKILL to every process.
func (g *Group) KillAll() { g.Signal(syscall.SIGKILL) }
