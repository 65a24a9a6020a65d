package comm

import "sync"

// Work is a started operation. Its order among the collectives of its
// communicator was fixed when it was started; the caller may compute while it
// runs and wait later. The buffers of the Call belong to the operation until
// it is done.
type Work struct {
	done chan struct{}
	once sync.Once
	err  error // written once, before done is closed
}

// NewWork returns a Work that is running until Complete is called.
func NewWork() *Work { return &Work{done: make(chan struct{})} }

// Failed returns a Work that is already done with err.
func Failed(err error) *Work {
	w := NewWork()
	w.Complete(err)
	return w
}

// succeeded is shared by every operation that was done as it started.
var succeeded = Failed(nil)

// Succeeded returns a Work that is already done without error. It is
// shared, so it costs nothing; its Complete has no effect.
func Succeeded() *Work { return succeeded }

// Complete marks w done with err. Only the first call has an effect.
func (w *Work) Complete(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.done)
	})
}

// Wait blocks until the operation is done and returns its error. The
// operation ends by itself: on success, or on an error that its context's
// deadline, a peer's failure or the communicator's failure timeout raised.
func (w *Work) Wait() error {
	<-w.done
	return w.err
}

// Done is closed when the operation is done.
func (w *Work) Done() <-chan struct{} { return w.done }

// Test reports, without blocking, whether the operation is done and if so its error.
func (w *Work) Test() (done bool, err error) {
	select {
	case <-w.done:
		return true, w.err
	default:
		return false, nil
	}
}
