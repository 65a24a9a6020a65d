package nccl

import (
	"errors"
	"runtime"
	"sync"
)

// osThread is a goroutine locked to an OS thread with a device's primary
// context current, running the calls handed to do one at a time. CUDA
// contexts, and NCCL's group state (ncclGroupStart/End, and in NCCL 2.23–
// 2.26 the background job of a non-blocking init or split), are per
// thread: a Device has one for memory and copies, and every Comm one of
// its own for its NCCL calls, so that no communicator's group or pending
// init shares a thread with another's.
type osThread struct {
	calls chan func()

	mu      sync.RWMutex // held (shared) while a call is handed over; stop takes it alone
	stopped bool
}

// errStopped is do's error after stop: the communicator is closed.
var errStopped = errors.New("nccl: the communicator's thread has ended (closed)")

// startThread starts a thread and runs setup on it first; on setup's
// error the thread ends and the error is returned.
func startThread(setup func() error) (*osThread, error) {
	t := &osThread{calls: make(chan func())}
	ready := make(chan error)
	go func() {
		// Never unlocked: the goroutine ends with the thread (stop), and
		// a locked goroutine that ends takes its thread with it.
		runtime.LockOSThread()
		err := setup()
		ready <- err
		if err != nil {
			return
		}
		for f := range t.calls {
			f()
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return t, nil
}

// do runs f on the thread and returns its error (errStopped, without
// running f, once the thread was stopped).
func (t *osThread) do(f func() error) error {
	done := make(chan error, 1)
	t.mu.RLock()
	if t.stopped {
		t.mu.RUnlock()
		return errStopped
	}
	t.calls <- func() { done <- f() }
	t.mu.RUnlock()
	return <-done
}

// stop ends the thread once the calls handed to it have run; later calls
// of do fail with errStopped.
func (t *osThread) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.stopped = true
		close(t.calls)
	}
}
