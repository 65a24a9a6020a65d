package netmesh

import (
	"sync"
	"time"
)

// stallWatch tells whether this process was stalled: a goroutine notes
// the time at short intervals, so a gap between two notes far longer than
// the interval means the process did not run in between. The clock is
// monotonic, which advances while the process is stopped.
type stallWatch struct {
	every time.Duration // how often the goroutine notes the time
	limit time.Duration // a gap longer than this is a stall
	keep  time.Duration // a stall counts for failures found this long after it ended
	// past is the failure timeout: a stall at least this long (the peers
	// gave this rank up) counts for longer, until wake (see newStallWatch).
	past, wake time.Duration

	mu   sync.Mutex // guards the fields below
	last time.Time  // the goroutine's last note
	// gap and ended are the last stall: how long, and when it ended.
	gap   time.Duration
	ended time.Time

	stop chan struct{}
	done chan struct{}
}

// newStallWatch watches this process for stalls longer than half of
// failureTimeout (and than a second, so that a loaded host's scheduling
// delays are not taken for one), until close. A stall explains failures
// found up to failureTimeout after it ended; one of failureTimeout or
// more, after which the peers have given this rank up, up to twice
// failureTimeout and a second more: such a peer sends nothing more, but
// the packets it sent before, read on waking, restart the link's silence
// clock, which then runs out a whole failureTimeout after the wake (seen
// over QUIC: the woken rank blamed a live peer); the extra second is for
// a loaded host. A shorter stall keeps the short window, so that a
// scheduling hiccup does not make a live peer's real death this rank's.
func newStallWatch(failureTimeout time.Duration) *stallWatch {
	s := &stallWatch{
		every: min(max(failureTimeout/20, 5*time.Millisecond), 250*time.Millisecond),
		limit: max(failureTimeout/2, time.Second),
		keep:  failureTimeout,
		past:  failureTimeout,
		wake:  2*failureTimeout + time.Second,
		last:  time.Now(),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go s.run()
	return s
}

func (s *stallWatch) run() {
	defer close(s.done)
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.note(time.Now())
		}
	}
}

// note records that the process ran at now.
func (s *stallWatch) note(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gap := now.Sub(s.last); gap > s.limit {
		s.gap, s.ended = gap, now
	}
	s.last = now
}

// stalled reports whether the process was stalled recently enough, at
// now, to explain a peer's connection found dead: a stall that ended less
// than keep ago (wake ago for one of at least past), or one still being
// recovered from (the goroutine has not run since). It returns how long
// the stall lasted.
func (s *stallWatch) stalled(now time.Time) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gap := now.Sub(s.last); gap > s.limit {
		return gap, true
	}
	if s.ended.IsZero() {
		return 0, false
	}
	since := now.Sub(s.ended)
	if since < s.keep || s.past > 0 && s.gap >= s.past && since < s.wake {
		return s.gap, true
	}
	return 0, false
}

func (s *stallWatch) close() {
	close(s.stop)
	<-s.done
}
