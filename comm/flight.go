package comm

import (
	"errors"
	"log/slog"
	"sync"
	"time"
)

// FlightRecorder keeps a communicator's last collectives — what each was
// (its Signature and sequence number), when it started and ended, how it
// ended, and which peers it was left waiting on — and, when one fails by
// a deadline, an abort or a mismatch, writes them to a logger with one
// line per rank known to be behind, as torch's
// TORCH_NCCL_DUMP_ON_TIMEOUT does. An Exec given one (ExecConfig.Recorder)
// records every task it numbers; without one it records nothing and
// costs a nil check. It is safe for concurrent use.
type FlightRecorder struct {
	log  *slog.Logger
	comm string // the communicator's name, for the dump
	rank int

	mu     sync.Mutex // guards the fields below
	ring   []FlightRecord
	next   int  // where the next record goes
	dumped bool // the dump is written once, at the first failure
}

// FlightRecord is one collective in a FlightRecorder.
type FlightRecord struct {
	Seq        uint64
	Call       Signature
	Start, End time.Time // End is zero while it runs
	// Err is how it ended (nil: it succeeded, or it still runs).
	Err error
	// Behind are the ranks it was left waiting on, as its error names them
	// (*LateError, or the peer of a failure), with the last collective
	// each had started where known (0 otherwise).
	Behind []int
	Last   []uint64
}

// State is "running", "ok" or "failed".
func (r FlightRecord) State() string {
	switch {
	case r.End.IsZero():
		return "running"
	case r.Err == nil:
		return "ok"
	}
	return "failed"
}

// NewFlightRecorder keeps the last n collectives of the communicator name
// of rank, and writes them to log (slog.Default() if nil) at the first
// failure. n < 1 is 1.
func NewFlightRecorder(n int, name string, rank int, log *slog.Logger) *FlightRecorder {
	if log == nil {
		log = slog.Default()
	}
	return &FlightRecorder{log: log, comm: name, rank: rank, ring: make([]FlightRecord, max(n, 1))}
}

// begin records that collective seq started now.
func (f *FlightRecorder) begin(seq uint64, call Signature) {
	now := time.Now()
	f.mu.Lock()
	f.ring[f.next] = FlightRecord{Seq: seq, Call: call, Start: now}
	f.next = (f.next + 1) % len(f.ring)
	f.mu.Unlock()
}

// end records how collective seq ended; the first failure by a deadline,
// an abort or a mismatch writes the dump.
func (f *FlightRecorder) end(seq uint64, err error) {
	now := time.Now()
	f.mu.Lock()
	// Newest first: the collective that ends is almost always the last
	// one begun, so this is one step, not a pass over the ring.
	for i := range f.ring {
		if r := &f.ring[(f.next-1-i+len(f.ring))%len(f.ring)]; r.Seq == seq && r.End.IsZero() && !r.Start.IsZero() {
			r.End, r.Err = now, err
			r.Behind, r.Last = behindOf(err)
			break
		}
	}
	dump := err != nil && !f.dumped && dumpWorthy(err)
	if dump {
		f.dumped = true
	}
	f.mu.Unlock()
	if dump {
		f.Dump(err)
	}
}

// dumpWorthy says whether err is a failure the dump is for.
func dumpWorthy(err error) bool {
	for _, e := range []error{ErrTimeout, ErrAborted, ErrMismatch, ErrPeerFailed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// behindOf is the ranks err says this rank was left waiting on.
func behindOf(err error) ([]int, []uint64) {
	var le *LateError
	if errors.As(err, &le) {
		return le.Ranks, le.Last
	}
	if b, ok := CulpritOf(err); ok && !b.Outside {
		return []int{b.Rank}, []uint64{0}
	}
	return nil, nil
}

// Records are the collectives kept, oldest first.
func (f *FlightRecorder) Records() []FlightRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]FlightRecord, 0, len(f.ring))
	for i := range f.ring {
		if r := f.ring[(f.next+i)%len(f.ring)]; !r.Start.IsZero() {
			out = append(out, r)
		}
	}
	return out
}

// Dump writes the records to the logger, oldest first, then one line per
// rank known to be behind (the ranks the last failed collectives waited
// on): cause says why.
func (f *FlightRecorder) Dump(cause error) {
	recs := f.Records()
	f.log.Warn("flight recorder: the last collectives", "comm", f.comm, "rank", f.rank, "kept", len(recs), "cause", cause)
	behind := map[int]uint64{}
	var at uint64
	for _, r := range recs {
		took := r.End.Sub(r.Start)
		if r.End.IsZero() {
			took = time.Since(r.Start)
		}
		attrs := []any{"comm", f.comm, "rank", f.rank, "seq", r.Seq, "call", r.Call.String(), "state", r.State(),
			"start", r.Start.Format(time.RFC3339Nano), "took", took.Round(time.Microsecond)}
		if len(r.Behind) > 0 {
			attrs = append(attrs, "waited on", r.Behind)
		}
		if r.Err != nil {
			attrs = append(attrs, "err", r.Err)
		}
		f.log.Warn("flight recorder: collective", attrs...)
		for i, p := range r.Behind {
			if r.Err != nil {
				behind[p], at = max(behind[p], r.Last[i]), r.Seq
			}
		}
	}
	for p, last := range behind {
		f.log.Warn("flight recorder: rank behind", "comm", f.comm, "rank", f.rank, "behind", p, "its last started", last, "this rank at", at)
	}
}
