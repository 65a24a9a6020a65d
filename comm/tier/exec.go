package tier

import (
	"context"
	"sync"

	"github.com/hiercomm/hiercomm/comm"
)

// Task is one collective (or Split) on its way through an Exec, with X, the
// tier's own state of it.
type Task[X any] struct {
	Ctx  context.Context
	Call comm.Call
	// Seq is the task's sequence number on its communicator, fixed when it
	// was started (1, 2, …); 0 for a task refused before it was numbered.
	Seq uint64
	// Err is this rank's own refusal of the call (a bad argument), found
	// when it was started. The task still runs, so that the tier can tell
	// the peers and keep the ranks in step.
	Err error
	X   X

	work     *comm.Work
	detached bool
	// recordEnd, with a Recorder, records the end of a detached task
	// when it completes (nil otherwise).
	recordEnd func(error)
}

// Detach tells the Exec that the task ends later than its run: the Exec
// does not complete the task with what the run returns, and the caller
// completes it with done (exactly once, from any goroutine). A tier whose
// run only launches the operation (a GPU stream) uses it.
func (t *Task[X]) Detach() (done func(error)) {
	t.detached = true
	if t.work == nil {
		t.work = comm.NewWork()
	}
	if t.recordEnd != nil {
		return func(err error) {
			t.recordEnd(err)
			t.work.Complete(err)
		}
	}
	return t.work.Complete
}

// ExecConfig is what an Exec needs from its communicator.
type ExecConfig[X any] struct {
	// Concurrent runs each task as soon as it is started, each on a
	// goroutine of its own (or the caller's, for a blocking call): the
	// order is only the sequence numbers', and the tier keeps the ranks
	// in step by them (nexar's tagged frames). Otherwise the tasks run one
	// at a time, in the order they were started.
	Concurrent bool
	// Locker guards the numbering, and Admit with it. If nil, the Exec has
	// a mutex of its own. A tier that must register a task in the same
	// critical section as it is numbered (frames that arrive for it must
	// find it) passes the mutex of that state.
	Locker sync.Locker
	// Admit, if set, runs with Locker held once the task is numbered and
	// before it runs or is queued. A non-nil error completes the task with
	// that error at once, and it is not run (it keeps its number).
	Admit func(t *Task[X]) error
	// Run runs the task and returns its error (unless it Detached).
	// Required.
	Run func(t *Task[X]) error
	// Refuse is the error of a task that will never run, wrapping err
	// (comm.ErrClosed): started after Close (Seq 0), or still queued at Close.
	// If nil, the error is err.
	Refuse func(t *Task[X], err error) error
	// Recorder, if set, records every task that is numbered and how it
	// ended (a detached task: when it completes); Close retires it from
	// the live recorders (DumpLive).
	Recorder *FlightRecorder
	// Recycle says that Run (and Admit and Refuse) keep no reference to
	// the task once Run has returned (unless it Detached): the task of a
	// blocking call that ran on the caller's goroutine is then reused by
	// a later one instead of allocated for each (a Task holds the Call: a
	// few hundred bytes a small collective would otherwise allocate). Not
	// with a Recorder.
	Recycle bool
}

// Exec is the executor behind a communicator's Start: it numbers the
// collectives in the order they are started, runs them in that order (or
// all at once, ExecConfig.Concurrent) and completes their Work. A blocking
// call (Do) runs on the caller's goroutine when nothing is queued or
// running: no hand-off to another goroutine, which is most of a small
// collective's latency. Close refuses what is queued; Wait waits for the
// running task. It is safe for concurrent use.
type Exec[X any] struct {
	cfg     ExecConfig[X]
	own     sync.Mutex
	mu      sync.Locker // cfg.Locker or &own; guards the fields below
	seq     uint64
	queue   []*Task[X]
	running bool // a runner drains the queue (Concurrent: unused)
	closed  bool
	runners sync.WaitGroup // goroutines inside Run
	free    sync.Pool      // *Task[X] that ran inline, with ExecConfig.Recycle
}

// NewExec returns an executor with cfg.
func NewExec[X any](cfg ExecConfig[X]) *Exec[X] {
	if cfg.Run == nil {
		panic("NewExec: ExecConfig.Run is nil")
	}
	e := &Exec[X]{cfg: cfg}
	e.mu = cfg.Locker
	if e.mu == nil {
		e.mu = &e.own
	}
	return e
}

// Start numbers the task of call and returns its Work at once; verr is
// this rank's refusal of call (Task.Err), x the tier's state.
func (e *Exec[X]) Start(ctx context.Context, call comm.Call, verr error, x X) *comm.Work {
	t := &Task[X]{Ctx: ctx, Call: call, Err: verr, X: x, work: comm.NewWork()}
	switch e.admit(t, false) {
	case runGo:
		go e.runOne(t)
	case runQueue:
		go e.drain(nil)
	}
	return t.work
}

// Do is Start and Wait in one: when nothing is queued or running (always,
// if Concurrent), the task runs on the calling goroutine.
func (e *Exec[X]) Do(ctx context.Context, call comm.Call, verr error, x X) error {
	t := e.inlineTask()
	t.Ctx, t.Call, t.Err, t.X = ctx, call, verr, x
	switch e.admit(t, true) {
	case runHere:
		err := e.cfg.Run(t)
		e.record(t, err)
		if !e.cfg.Concurrent {
			e.handOff()
		}
		e.runners.Done()
		if !t.detached {
			e.recycle(t)
			return err
		}
	case runQueue:
		e.drain(t)
	}
	return t.work.Wait()
}

// inlineTask is a blank task for Do: a recycled one if any.
func (e *Exec[X]) inlineTask() *Task[X] {
	if e.cfg.Recycle && e.cfg.Recorder == nil {
		if t, ok := e.free.Get().(*Task[X]); ok {
			return t
		}
	}
	return &Task[X]{}
}

// recycle keeps t, which ran inline and is done with, for a later Do
// (ExecConfig.Recycle): blanked, so that it holds no buffers or context.
func (e *Exec[X]) recycle(t *Task[X]) {
	if !e.cfg.Recycle || e.cfg.Recorder != nil || t.work != nil || t.detached {
		return
	}
	*t = Task[X]{}
	e.free.Put(t)
}

// What admit leaves its caller to do.
const (
	runNone  = iota // t is queued behind a runner, or already completed
	runHere         // run t on this goroutine (Do)
	runGo           // run t on a goroutine of its own (Concurrent Start)
	runQueue        // become the queue's runner
)

// admit numbers t and decides where it runs; inline says the caller can
// run it itself (Do). The runner's count in runners is taken here, under
// the lock. A task that is not to run is completed here.
func (e *Exec[X]) admit(t *Task[X], inline bool) int {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		e.complete(t, e.refuse(t, comm.ErrClosed))
		return runNone
	}
	e.seq++
	t.Seq = e.seq
	if rec := e.cfg.Recorder; rec != nil {
		rec.begin(t.Seq, SignatureOf(t.Ctx, t.Call))
		t.recordEnd = func(err error) { rec.end(t.Seq, err) }
	}
	if e.cfg.Admit != nil {
		if err := e.cfg.Admit(t); err != nil {
			e.mu.Unlock()
			e.record(t, err)
			e.complete(t, err)
			return runNone
		}
	}
	defer e.mu.Unlock()
	switch {
	case e.cfg.Concurrent:
		e.runners.Add(1)
		if inline {
			return runHere
		}
		return runGo
	case inline && !e.running && len(e.queue) == 0:
		e.running = true
		e.runners.Add(1)
		return runHere
	}
	if t.work == nil {
		t.work = comm.NewWork()
	}
	e.queue = append(e.queue, t)
	if e.running {
		return runNone
	}
	e.running = true
	e.runners.Add(1)
	return runQueue
}

// record gives the Recorder, if any, the end of t's run (a detached
// task's end is recorded when it completes).
func (e *Exec[X]) record(t *Task[X], err error) {
	if e.cfg.Recorder != nil && !t.detached {
		e.cfg.Recorder.end(t.Seq, err)
	}
}

// complete ends t with err (Start's and Do's Work, or Do's inline result).
func (e *Exec[X]) complete(t *Task[X], err error) {
	if t.work == nil {
		t.work = comm.NewWork()
	}
	t.work.Complete(err)
}

func (e *Exec[X]) refuse(t *Task[X], err error) error {
	if e.cfg.Refuse != nil {
		return e.cfg.Refuse(t, err)
	}
	return err
}

// runOne runs a Concurrent task on a goroutine of its own.
func (e *Exec[X]) runOne(t *Task[X]) {
	defer e.runners.Done()
	e.finish(t, e.cfg.Run(t))
}

func (e *Exec[X]) finish(t *Task[X], err error) {
	e.record(t, err)
	if !t.detached {
		t.work.Complete(err)
	}
}

// drain runs the queue in order, as its runner. With until set (a blocking
// call's own task), it returns once until is done, handing what is left to
// a new goroutine.
func (e *Exec[X]) drain(until *Task[X]) {
	for {
		e.mu.Lock()
		if len(e.queue) == 0 {
			e.running = false
			e.mu.Unlock()
			e.runners.Done()
			return
		}
		t := e.queue[0]
		e.queue[0] = nil // the task's buffers and context are not kept alive
		e.queue = e.queue[1:]
		e.mu.Unlock()
		e.finish(t, e.cfg.Run(t))
		if t == until {
			e.handOff()
			e.runners.Done()
			return
		}
	}
}

// handOff is called by a runner that stops running the queue (its caller's
// task is done): a goroutine takes its place if anything is queued.
func (e *Exec[X]) handOff() {
	e.mu.Lock()
	more := len(e.queue) > 0
	if more {
		e.runners.Add(1) // the new runner's count, taken before ours is given back
	} else {
		e.running = false
	}
	e.mu.Unlock()
	if more {
		go e.drain(nil)
	}
}

// Close refuses every later task and every queued one (ExecConfig.Refuse
// with comm.ErrClosed); the running task goes on until the tier ends it. Only
// the first call has an effect; it reports whether it was the first.
func (e *Exec[X]) Close() bool {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return false
	}
	e.closed = true
	queued := e.queue
	e.queue = nil
	e.mu.Unlock()
	if e.cfg.Recorder != nil {
		e.cfg.Recorder.retire() // no longer live (DumpLive)
	}
	for _, t := range queued {
		t.work.Complete(e.refuse(t, comm.ErrClosed))
	}
	return true
}

// Wait waits until no task is running (after Close: until the runners have
// ended). A detached task's completion is the tier's, not waited for.
func (e *Exec[X]) Wait() { e.runners.Wait() }
