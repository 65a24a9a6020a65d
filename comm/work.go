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

	// A Work made by Map has no state of its own: it is done when inner
	// is, and its error is mapErr of inner's.
	inner  *Work
	mapErr func(error) error

	spin func(done <-chan struct{}) // NewSpinningWork's; nil: Wait only sleeps
}

// NewSpinningWork is NewWork for an operation that its waiter can move
// on itself, as a transport's progress engine does: before Wait sleeps,
// it calls spin with the Work's Done channel, and spin returns when that
// closes or when it gives up (it must be bounded: a short busy wait that
// reads the network, say). Only Wait spins; Test and Done do not.
func NewSpinningWork(spin func(done <-chan struct{})) *Work {
	return &Work{done: make(chan struct{}), spin: spin}
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

// Map returns a Work that is done when w is, with f of w's error (f is
// called with nil too, and may be called more than once): a composed
// communicator hands on a part's operation in its own terms without a
// goroutine to wait for it. The returned Work's Complete has no effect.
func (w *Work) Map(f func(error) error) *Work {
	return &Work{done: w.done, inner: w, mapErr: f, spin: w.spin}
}

// Complete marks w done with err. Only the first call has an effect.
func (w *Work) Complete(err error) {
	if w.inner != nil {
		return
	}
	w.once.Do(func() {
		w.err = err
		close(w.done)
	})
}

// Wait blocks until the operation is done and returns its error. The
// operation ends by itself: on success, or on an error that its context's
// deadline, a peer's failure or the communicator's failure timeout raised.
func (w *Work) Wait() error {
	if w.spin != nil {
		select {
		case <-w.done:
		default:
			w.spin(w.done)
		}
	}
	<-w.done
	return w.result()
}

// result is w's error once it is done.
func (w *Work) result() error {
	if w.inner != nil {
		return w.mapErr(w.inner.result())
	}
	return w.err
}

// Done is closed when the operation is done.
func (w *Work) Done() <-chan struct{} { return w.done }

// Test reports, without blocking, whether the operation is done and if so its error.
func (w *Work) Test() (done bool, err error) {
	select {
	case <-w.done:
		return true, w.result()
	default:
		return false, nil
	}
}
