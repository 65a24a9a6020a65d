package nccl

import "github.com/hiercomm/hiercomm/comm"

// FakeEvents counts the events alive in the fake driver behind d, and how
// many were ever created, for the external tests.
func FakeEvents(d *Device) (live, created int) {
	w := d.lib.drv.(fakeDriver).w
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.events), w.eventsCreated
}

// WatchControl starts the watch of control that a Comm keeps (watchControl)
// for the external tests: done is closed when the watch ends, and err is
// then why.
func WatchControl(control comm.Communicator) (done <-chan struct{}, err func() error) {
	w := watchControl(control)
	return w.done, func() error { <-w.done; return w.err }
}
