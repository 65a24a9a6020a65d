// Package procgroup runs the processes of a local job: start them, copy
// their output line by line with a prefix naming each, and when one fails,
// stop the rest (at once, or after a grace period, SIGTERM and a wait).
// Both local launchers (internal/nexarjob's flat test worlds and the
// cluster layer's emulated nodes) use it. It imports the standard library only and
// knows nothing of ranks' meaning, sockets or collectives.
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
	// (by default they are stopped).
	KeepOthers bool
	// Grace is how long, after the first process fails, the others get to
	// exit by themselves — to notice the failure and report it — before
	// they are sent SIGTERM. If zero, they are signalled at once.
	Grace time.Duration
	// KillAfter is how long a process gets after SIGTERM (the group's,
	// once Grace has passed, or Stop's) before SIGKILL. If zero, there is
	// no SIGTERM: a failure, and Stop, SIGKILL at once.
	KillAfter time.Duration
	// Notify, if set, is called with one line (no newline) each time the
	// group starts to stop its processes and each time it signals them
	// after a failure: what happened, what it does, who is still running.
	// It may be called from any goroutine, never concurrently with itself.
	Notify func(line string)
	// Bind starts each of Procs bound to its share of the CPUs this
	// process may use (bind.go: process i of n gets CPUs i·m/n to
	// (i+1)·m/n of the m, or CPU i mod m when there are more processes
	// than CPUs), as mpirun --bind-to core. A process started by Add is
	// not bound.
	Bind bool
	// OnExit, if set, is called once for each process that exits (err:
	// its *ExitError, nil for exit 0), on a goroutine of the group, after
	// a failure's stopping of the others began (unless KeepOthers) and
	// before Wait can return: it may Add processes (a launcher replacing
	// a failed one).
	OnExit func(i int, err error)
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
	ctx       context.Context
	keep      bool
	grace     time.Duration
	killAfter time.Duration
	notify    func(string)
	onExit    func(int, error)
	stdout    io.Writer
	stderr    io.Writer
	outMu     sync.Mutex    // one line at a time across all processes
	done      chan struct{} // closed when every process has exited

	mu      sync.Mutex  // guards the fields below, and serializes notify
	procs   []*exec.Cmd // appended by Add
	names   []string    // Proc.Name of each
	cpus    int         // the processes the host's CPUs were shared among at the start
	allowed []int       // with Spec.Bind, the CPUs the processes of Spec.Procs share (shareOf)
	live    int         // processes not yet counted out (watch)
	errs    []error     // per process
	exited  []bool      // per process: its Wait has returned
	first   int         // index of the first process that failed, or -1
	stage   stage       // how far stopping the group has gone
	timer   *time.Timer // the next stage's, while one is pending
}

// stage is how far stopping a group has gone. It only moves forward.
type stage int

const (
	running     stage = iota
	graceful          // a process failed: the others have Grace to exit
	terminating       // SIGTERM sent: KillAfter until SIGKILL
	killing           // SIGKILL sent
)

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
	g := &Group{
		ctx: ctx, keep: spec.KeepOthers, grace: spec.Grace, killAfter: spec.KillAfter, notify: spec.Notify, onExit: spec.OnExit,
		stdout: spec.Stdout, stderr: spec.Stderr, done: make(chan struct{}), first: -1, cpus: len(spec.Procs),
	}
	if spec.Bind {
		g.allowed = threadCPUs() // this goroutine's thread's, as every thread's of a Go program
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range spec.Procs {
		if err := g.startLocked(p); err != nil {
			g.stage = killing
			g.signal(syscall.SIGKILL)
			return nil, err
		}
	}
	for i := range g.procs {
		go g.watch(i)
	}
	return g, nil
}

// startLocked starts p as the group's next process. Called with mu held.
func (g *Group) startLocked(p Proc) error {
	cmd := exec.CommandContext(g.ctx, p.Path, p.Args...)
	cmd.Env = withCPUShare(p.Env, g.cpus)
	cmd.ExtraFiles = p.Files
	// Each process leads its own process group, so that stopping it
	// stops what it started too (a shell's children, a helper that
	// holds its output open).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// exec copies the output; once the process has exited, Wait waits
	// at most this long for whatever else still holds it open.
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout = &lineWriter{prefix: p.Prefix, out: g.stdout, mu: &g.outMu}
	cmd.Stderr = &lineWriter{prefix: p.Prefix, out: g.stderr, mu: &g.outMu}
	var cpus []int // Spec.Bind's, for the processes of Spec.Procs
	if i := len(g.procs); i < g.cpus {
		cpus = shareOf(g.allowed, i, g.cpus)
	}
	if err := startOn(cpus, cmd.Start); err != nil {
		return fmt.Errorf("procgroup: starting %s%s: %w", p.Prefix, p.Path, err)
	}
	g.procs = append(g.procs, cmd)
	g.names = append(g.names, p.Name)
	g.errs = append(g.errs, nil)
	g.exited = append(g.exited, false)
	g.live++
	return nil
}

// Add starts p as one more process of the running group (a replacement
// for one that failed), with the output, the CPU share and the rules of
// the others, and returns its index. It fails once the group is being
// stopped or every process has exited.
func (g *Group) Add(p Proc) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stage != running || g.live == 0 {
		return 0, errors.New("procgroup: Add: the group is stopping or over")
	}
	if err := g.startLocked(p); err != nil {
		return 0, err
	}
	i := len(g.procs) - 1
	go g.watch(i)
	return i, nil
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

// watch waits for every process; the first failure stops the rest
// (failed), unless the group is already being stopped: after Stop, a
// process that exits, even by the signal, is no reason to hurry the others.
// watch waits for process i, records how it ended, and closes done once
// every process has.
func (g *Group) watch(i int) {
	g.mu.Lock()
	cmd := g.procs[i]
	g.mu.Unlock()
	err := cmd.Wait()
	cmd.Stdout.(*lineWriter).flush()
	cmd.Stderr.(*lineWriter).flush()
	g.mu.Lock()
	g.exited[i] = true
	var exit error
	if err != nil {
		ee := &ExitError{Index: i, Name: g.names[i], Pid: cmd.Process.Pid, Err: err}
		g.errs[i], exit = ee, ee
		if g.first < 0 {
			g.first = i
		}
		if !g.keep && g.stage == running {
			g.failed(ee)
		}
	}
	g.mu.Unlock()
	if g.onExit != nil {
		g.onExit(i, exit)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.live--
	if g.live > 0 {
		return
	}
	if g.timer != nil {
		g.timer.Stop()
	}
	close(g.done)
}

// failed begins stopping the group after the first failure, ee: Grace
// for the others to exit by themselves, then SIGTERM, then after
// KillAfter SIGKILL. Called with mu held.
func (g *Group) failed(ee *ExitError) {
	g.stage = graceful
	running := g.running()
	switch {
	case len(running) == 0:
	case g.grace > 0:
		g.note("%v; the others (%s) have %v to exit before SIGTERM", ee, strings.Join(running, ", "), g.grace)
		g.timer = time.AfterFunc(g.grace, func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.stage == graceful {
				g.terminate(fmt.Sprintf("%v after %s failed", g.grace, g.label(ee.Index)))
			}
		})
	default:
		g.note("%v; stopping the others (%s)", ee, strings.Join(running, ", "))
		g.terminate("")
	}
}

// terminate sends SIGTERM to every process still running and arms
// SIGKILL KillAfter later, or sends SIGKILL at once when KillAfter is
// zero; why, when not empty, is said first in the line it notes. Called
// with mu held.
func (g *Group) terminate(why string) {
	running := g.running()
	if g.killAfter <= 0 {
		g.kill(why)
		return
	}
	g.stage = terminating
	if len(running) > 0 && why != "" {
		g.note("%s: SIGTERM to %s; SIGKILL in %v", why, strings.Join(running, ", "), g.killAfter)
	}
	g.signal(syscall.SIGTERM)
	g.timer = time.AfterFunc(g.killAfter, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.stage == terminating {
			g.kill(fmt.Sprintf("%v after SIGTERM", g.killAfter))
		}
	})
}

// kill sends SIGKILL to every process still running. Called with mu held.
func (g *Group) kill(why string) {
	g.stage = killing
	if running := g.running(); len(running) > 0 && why != "" {
		g.note("%s: SIGKILL to %s", why, strings.Join(running, ", "))
	}
	g.signal(syscall.SIGKILL)
}

// running names the processes that have not exited. Called with mu held.
func (g *Group) running() []string {
	var names []string
	for i, done := range g.exited {
		if !done {
			names = append(names, g.label(i))
		}
	}
	return names
}

// label is process i's name, or its pid when it has none.
func (g *Group) label(i int) string {
	if g.names[i] != "" {
		return g.names[i]
	}
	return fmt.Sprintf("pid %d", g.procs[i].Process.Pid)
}

// note tells Notify. Called with mu held, so lines never interleave.
func (g *Group) note(format string, a ...any) {
	if g.notify != nil {
		g.notify(fmt.Sprintf(format, a...))
	}
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
func (g *Group) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.procs)
}

// Pid is process i's pid.
func (g *Group) Pid(i int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.procs[i].Process.Pid
}

// Kill sends SIGKILL to process i and its process group, for fault tests.
func (g *Group) Kill(i int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if i < 0 || i >= len(g.procs) {
		return fmt.Errorf("procgroup: process %d out of range [0, %d)", i, len(g.procs))
	}
	return syscall.Kill(-g.procs[i].Process.Pid, syscall.SIGKILL)
}

// Signal sends sig to every process still running and to what it started
// (its process group). It changes nothing else: a process that exits by
// it is a failure like any other (Stop is what a launcher forwards a
// SIGINT or SIGTERM with).
func (g *Group) Signal(sig syscall.Signal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.signal(sig)
}

// signal is Signal with mu held. A process whose Wait has returned is
// skipped: its pid may belong to another process by now.
func (g *Group) signal(sig syscall.Signal) {
	for i, cmd := range g.procs {
		if cmd.Process != nil && !g.exited[i] {
			_ = syscall.Kill(-cmd.Process.Pid, sig)
		}
	}
}

// Stop asks every process to end, as a launcher does when it is itself
// told to stop (Ctrl-C, a scheduler's SIGTERM): it sends sig to every
// process still running, and SIGKILL to what is left KillAfter later (at
// once when KillAfter is zero). From then on an exit, failed or not (a
// process without a handler dies by sig), does not hurry the others:
// each gets the whole KillAfter for its cleanup. A Stop during a
// failure's Grace ends the Grace; a Stop once SIGTERM or SIGKILL has gone
// out changes nothing.
func (g *Group) Stop(sig syscall.Signal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stage >= terminating {
		return
	}
	if g.timer != nil {
		g.timer.Stop()
	}
	if g.killAfter <= 0 {
		g.stage = killing
		g.signal(syscall.SIGKILL)
		return
	}
	g.stage = terminating
	g.signal(sig)
	g.timer = time.AfterFunc(g.killAfter, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.stage == terminating {
			g.kill(fmt.Sprintf("%v after %v", g.killAfter, sig))
		}
	})
}

// KillAll sends SIGKILL to every process still running.
func (g *Group) KillAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stage = killing
	g.signal(syscall.SIGKILL)
}
