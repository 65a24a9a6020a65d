package ncclfake

import "github.com/hiercomm/hiercomm/nccl/internal/cuapi"

// The fake's streams and events.
//
// A stream is a queue of operations run in order by a goroutine that
// exists while the queue is not empty. An operation may wait for
// operations of other streams first (StreamWaitEvent, the streams of an
// NCCL group); an event is the marker operation EventRecord queued last on
// it. An operation that fails leaves its stream with a sticky error: the
// later operations of the stream are handed it instead of running (an
// NCCL operation then fails its communicator), and events and
// StreamSynchronize report it, as a CUDA context reports an illegal
// address for ever after.

// fakeOp is one operation queued on a stream.
type fakeOp struct {
	// run does the work, given the stream's sticky error (cuapi.CUDASuccess if
	// none), and returns its outcome; nil for a marker.
	run   func(sticky cuapi.CUResult) cuapi.CUResult
	waits []*fakeOp      // operations (of other streams) to wait for first
	done  chan struct{}  // closed once run has returned
	res   cuapi.CUResult // the stream's sticky error then; read after done, under w.mu
}

// fakeStream is a stream: one made by StreamCreate, a context's stream 0,
// or the stand-in for stream 0 of a communicator made on a thread with no
// current context.
type fakeStream struct {
	h       cuapi.Stream // 0 for a stream 0
	ctx     *fakeCtx     // the context current when it was made; nil if none
	queue   []*fakeOp
	running bool           // a goroutine is draining queue
	last    *fakeOp        // the operation queued last, nil if none yet
	err     cuapi.CUResult // sticky: the first failure of an operation
}

// fakeEvent is an event; rec is the marker of its last EventRecord.
type fakeEvent struct {
	rec *fakeOp
}

// stream resolves a stream handle: 0 and CU_STREAM_LEGACY are stream 0 of
// the calling thread's current context (cuapi.CUDAErrorInvalidContext without
// one); others must be live streams. The caller holds w.mu.
func (w *fakeWorld) stream(h cuapi.Stream) (*fakeStream, cuapi.CUResult) {
	if h == 0 || h == fakeStreamLegacy {
		c := w.thread().ctx
		if c == nil {
			return nil, cuapi.CUDAErrorInvalidContext
		}
		return c.legacyStream(), cuapi.CUDASuccess
	}
	s := w.streams[h]
	if s == nil {
		return nil, cuapi.CUDAErrorInvalidValue
	}
	return s, cuapi.CUDASuccess
}

// enqueue queues an operation on s that runs after every operation queued
// on s before it and after waits (nil entries are skipped). It returns at
// once. The caller holds w.mu.
func (w *fakeWorld) enqueue(s *fakeStream, run func(sticky cuapi.CUResult) cuapi.CUResult, waits ...*fakeOp) *fakeOp {
	op := &fakeOp{run: run, done: make(chan struct{})}
	for _, x := range waits {
		if x != nil {
			op.waits = append(op.waits, x)
		}
	}
	s.queue = append(s.queue, op)
	s.last = op
	if !s.running {
		s.running = true
		go w.drain(s)
	}
	return op
}

// drain runs s's operations in order until its queue is empty. A stream
// destroyed with work queued is drained the same way: the work finishes.
func (w *fakeWorld) drain(s *fakeStream) {
	for {
		w.mu.Lock()
		if len(s.queue) == 0 {
			s.running = false
			w.mu.Unlock()
			return
		}
		op := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		sticky := s.err
		w.mu.Unlock()

		for _, x := range op.waits {
			<-x.done
		}
		r := cuapi.CUDASuccess
		if op.run != nil {
			r = op.run(sticky)
		}
		w.mu.Lock()
		if r != cuapi.CUDASuccess && s.err == cuapi.CUDASuccess {
			s.err = r
		}
		op.res = s.err
		w.mu.Unlock()
		close(op.done)
	}
}

// StreamCreate makes a stream of the calling thread's current context (of
// none, if it has none: the fake does not insist).
func (d fakeDriver) StreamCreate(s *cuapi.Stream, flags uint32) cuapi.CUResult {
	w := d.w
	return w.locked(func() cuapi.CUResult {
		if s == nil || flags&^cuapi.StreamNonBlocking != 0 {
			return cuapi.CUDAErrorInvalidValue
		}
		st := &fakeStream{h: cuapi.Stream(w.handle()), ctx: w.thread().ctx}
		w.streams[st.h] = st
		*s = st.h
		return cuapi.CUDASuccess
	})
}

// StreamDestroy forgets the handle at once; work already queued still
// runs, as with cuStreamDestroy.
func (d fakeDriver) StreamDestroy(s cuapi.Stream) cuapi.CUResult {
	w := d.w
	return w.locked(func() cuapi.CUResult { return forget(w.streams, s) })
}

// forget deletes handle h from m (a world's streams or events), or is
// cuapi.CUDAErrorInvalidValue when m has no such handle. The caller holds w.mu.
func forget[K comparable, V any](m map[K]*V, h K) cuapi.CUResult {
	if m[h] == nil {
		return cuapi.CUDAErrorInvalidValue
	}
	delete(m, h)
	return cuapi.CUDASuccess
}

// StreamSynchronize waits for everything queued on s so far and returns
// the stream's sticky error, if any.
func (d fakeDriver) StreamSynchronize(s cuapi.Stream) cuapi.CUResult {
	w := d.w
	return w.locked(func() cuapi.CUResult {
		st, r := w.stream(s)
		if r != cuapi.CUDASuccess {
			return r
		}
		op := w.enqueue(st, nil)
		w.mu.Unlock()
		<-op.done
		w.mu.Lock()
		return op.res
	})
}

// StreamWaitEvent makes the operations queued on s from now on wait for
// the event's last record (no wait if it was never recorded).
func (d fakeDriver) StreamWaitEvent(s cuapi.Stream, e cuapi.Event, flags uint32) cuapi.CUResult {
	w := d.w
	return w.locked(func() cuapi.CUResult {
		st, r := w.stream(s)
		if r != cuapi.CUDASuccess {
			return r
		}
		ev := w.events[e]
		if ev == nil || flags != 0 {
			return cuapi.CUDAErrorInvalidValue
		}
		if ev.rec != nil {
			w.enqueue(st, nil, ev.rec)
		}
		return cuapi.CUDASuccess
	})
}

func (d fakeDriver) EventCreate(e *cuapi.Event, flags uint32) cuapi.CUResult {
	w := d.w
	return w.locked(func() cuapi.CUResult {
		if e == nil || flags&^fakeEventFlags != 0 {
			return cuapi.CUDAErrorInvalidValue
		}
		h := cuapi.Event(w.handle())
		w.events[h] = &fakeEvent{}
		w.eventsCreated++
		*e = h
		return cuapi.CUDASuccess
	})
}

// EventRecord captures the work queued on s so far: the event completes
// when all of it has run.
func (d fakeDriver) EventRecord(e cuapi.Event, s cuapi.Stream) cuapi.CUResult {
	w := d.w
	return w.locked(func() cuapi.CUResult {
		ev := w.events[e]
		if ev == nil {
			return cuapi.CUDAErrorInvalidValue
		}
		st, r := w.stream(s)
		if r != cuapi.CUDASuccess {
			return r
		}
		ev.rec = w.enqueue(st, nil)
		return cuapi.CUDASuccess
	})
}

// EventQuery is cuapi.CUDAErrorNotReady until the work the last EventRecord
// captured has run, then cuapi.CUDASuccess (or the stream's sticky error).
// An event never recorded is complete, as in CUDA.
func (d fakeDriver) EventQuery(e cuapi.Event) cuapi.CUResult {
	w := d.w
	return w.locked(func() cuapi.CUResult {
		ev := w.events[e]
		switch {
		case ev == nil:
			return cuapi.CUDAErrorInvalidValue
		case ev.rec == nil:
			return cuapi.CUDASuccess
		}
		select {
		case <-ev.rec.done:
			return ev.rec.res
		default:
			return cuapi.CUDAErrorNotReady
		}
	})
}

// EventDestroy forgets the handle; a pending record still completes.
func (d fakeDriver) EventDestroy(e cuapi.Event) cuapi.CUResult {
	w := d.w
	return w.locked(func() cuapi.CUResult { return forget(w.events, e) })
}
