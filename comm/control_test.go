package comm_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/hiercomm/hiercomm/comm"
)

// localControl is the Control of a test double whose ranks share no
// transport for news: Abort marks this rank aborted and tells no one, no
// outside detector's news changes anything, and no census is carried.
// Shrink is refused with ErrCannotShrink.
type localControl struct {
	mu    sync.Mutex
	ch    chan struct{}
	cause error
}

func (l *localControl) Abort(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cause == nil {
		l.cause = cause
		close(l.signal())
	}
}

func (l *localControl) signal() chan struct{} {
	if l.ch == nil {
		l.ch = make(chan struct{})
	}
	return l.ch
}

func (l *localControl) Aborted() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.signal()
}

func (l *localControl) AbortCause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

func (l *localControl) PeerFailed(int, error) {}

func (l *localControl) SetProgress(func() comm.Progress) (func(), bool) { return func() {}, false }

func (l *localControl) Progress(context.Context) ([]comm.Progress, []bool) { return nil, nil }

func (l *localControl) Announce(comm.Progress) {}

func (l *localControl) Shrink(context.Context) (comm.Communicator, error) {
	return nil, fmt.Errorf("a test double: %w", comm.ErrCannotShrink)
}
