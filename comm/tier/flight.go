package tier

import (
	"cmp"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// FlightRecorder keeps a communicator's last collectives — what each was
// (its Signature and sequence number), when it started and ended, how it
// ended, and which peers it was left waiting on — and, when one fails by
// a deadline, an abort or a mismatch, writes them to a logger with one
// line per rank known to be behind, as torch's
// TORCH_NCCL_DUMP_ON_TIMEOUT does. An Exec given one (ExecConfig.Recorder)
// records every task it numbers; without one it records nothing and
// costs a nil check. The tier adds what only it knows with Note (the
// hierarchy's phase, shared memory's node-mates waited on, NCCL's
// stream). Every recorder is live from NewFlightRecorder until its Exec
// is closed, and DumpLive writes them all (hiercomm's SIGUSR1). It is
// safe for concurrent use.
type FlightRecorder struct {
	log  *slog.Logger
	rank int

	mu   sync.Mutex // guards the fields below
	comm string     // the communicator's name, for the dump
	// job is this process's rank in the whole job, which the dump shows
	// before rank (Identify); -1: the communicator's ranks are the job's.
	job    int
	ring   []FlightRecord
	next   int  // where the next record goes
	dumped bool // the dump is written once, at the first failure
}

// FlightRecord is one collective in a FlightRecorder.
type FlightRecord struct {
	Seq        uint64
	Call       comm.Signature
	Start, End time.Time // End is zero while it runs
	// Err is how it ended (nil: it succeeded, or it still runs).
	Err error
	// Behind are the ranks it was left waiting on, as its error names them
	// (*comm.LateError, or the peer of a failure), with the last collective
	// each had started where known (0 otherwise).
	Behind []int
	Last   []uint64
	// Detail is the tier's note of where it is, or was when it ended
	// (Note): "rail 1 AllReduce", "step 2: waited on node-mates [2 3]",
	// "launched on stream 0x7f…".
	Detail string

	waiting []int // the ranks the tier noted it waits on (Note)
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
	f := &FlightRecorder{log: log, comm: name, rank: rank, job: -1, ring: make([]FlightRecord, max(n, 1))}
	live.Lock()
	live.set[f] = struct{}{}
	live.Unlock()
	return f
}

// Identify names the communicator in the dump (a part of a composed
// communicator is named by its role, "node 1 shm", "rail 0", as the
// composer's errors name it) and says that this process is rank job of
// the whole job, which the dump then shows first, before its rank in the
// communicator: rank=3 local=1 (the "waited on" and "behind" ranks stay
// the communicator's). job < 0: the communicator's ranks are the job's.
func (f *FlightRecorder) Identify(name string, job int) {
	f.mu.Lock()
	f.comm, f.job = name, job
	f.mu.Unlock()
}

// who is how the dump's lines name the communicator and this process.
func (f *FlightRecorder) who() []any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.job < 0 {
		return []any{"comm", f.comm, "rank", f.rank}
	}
	return []any{"comm", f.comm, "rank", f.job, "local", f.rank}
}

// live holds the recorders of communicators not yet closed, for DumpLive.
var live = struct {
	sync.Mutex
	set map[*FlightRecorder]struct{}
}{set: map[*FlightRecorder]struct{}{}}

// retire drops f from the live recorders (its Exec closed).
func (f *FlightRecorder) retire() {
	live.Lock()
	delete(live.set, f)
	live.Unlock()
}

// DumpLive writes the records of every live recorder (of a communicator
// not closed yet) to its logger, as Dump does, with why as the cause, and
// returns how many it wrote: the state of a running job on demand
// (hiercomm.Init's SIGUSR1 handler).
func DumpLive(why string) int {
	live.Lock()
	fs := make([]*FlightRecorder, 0, len(live.set))
	for f := range live.set {
		fs = append(fs, f)
	}
	live.Unlock()
	names := make(map[*FlightRecorder]string, len(fs))
	for _, f := range fs {
		f.mu.Lock()
		names[f] = f.comm
		f.mu.Unlock()
	}
	slices.SortFunc(fs, func(a, b *FlightRecorder) int { return cmp.Compare(names[a], names[b]) })
	cause := errors.New(why)
	for _, f := range fs {
		f.Dump(cause)
	}
	return len(fs)
}

// Note records detail as where collective seq is (FlightRecord.Detail)
// and, if not nil, the ranks it waits on there: if it fails with an error
// that names none (a deadline on a tier that does not probe), they are
// its Behind. A nil recorder does nothing, so a tier calls it without a
// check.
func (f *FlightRecorder) Note(seq uint64, detail string, waiting []int) {
	if f == nil {
		return
	}
	f.mu.Lock()
	if r := f.find(seq); r != nil {
		r.Detail = detail
		if waiting != nil {
			r.waiting = waiting
		}
	}
	f.mu.Unlock()
}

// find is the record of collective seq, newest first (the one a tier
// notes or ends is almost always the last one begun, so this is one step,
// not a pass over the ring); nil if it is not kept. f.mu must be held.
func (f *FlightRecorder) find(seq uint64) *FlightRecord {
	for i := range f.ring {
		if r := &f.ring[(f.next-1-i+len(f.ring))%len(f.ring)]; r.Seq == seq && !r.Start.IsZero() {
			return r
		}
	}
	return nil
}

// begin records that collective seq started now.
func (f *FlightRecorder) begin(seq uint64, call comm.Signature) {
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
	if r := f.find(seq); r != nil && r.End.IsZero() {
		r.End, r.Err = now, err
		r.Behind, r.Last = behindOf(err)
		if err != nil && r.Behind == nil && r.waiting != nil {
			r.Behind, r.Last = r.waiting, make([]uint64, len(r.waiting))
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
	for _, e := range []error{comm.ErrTimeout, comm.ErrAborted, comm.ErrMismatch, comm.ErrPeerFailed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// behindOf is the ranks err says this rank was left waiting on.
func behindOf(err error) ([]int, []uint64) {
	var le *comm.LateError
	if errors.As(err, &le) {
		return le.Ranks, le.Last
	}
	if b, ok := comm.CulpritOf(err); ok && !b.Outside {
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
	who := f.who()
	f.log.Warn("flight recorder: the last collectives", append(slices.Clip(who), "kept", len(recs), "cause", cause)...)
	behind := map[int]uint64{}
	var at uint64
	for _, r := range recs {
		took := r.End.Sub(r.Start)
		if r.End.IsZero() {
			took = time.Since(r.Start)
		}
		attrs := append(slices.Clip(who), "seq", r.Seq, "call", r.Call.String(), "state", r.State(),
			"start", r.Start.Format(time.RFC3339Nano), "took", took.Round(time.Microsecond))
		if len(r.Behind) > 0 {
			attrs = append(attrs, "waited on", r.Behind)
		}
		if r.Detail != "" {
			attrs = append(attrs, "detail", r.Detail)
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
		attrs := append(slices.Clip(who), "behind", p)
		if last > 0 { // 0: not known
			attrs = append(attrs, "its last started", last)
		}
		f.log.Warn("flight recorder: rank behind", append(attrs, "this rank at", at)...)
	}
}
