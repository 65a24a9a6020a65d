package commtest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// The fault suite: one rank of a fresh Split child ends a collective on
// its side (its context canceled or past its deadline, its communicator
// closed or aborted, or it comes too late), and every rank must return
// within Options.Timeout with an error that says what happened and who.

// FaultCases are the names of the fault suite's cases, in order; they are
// the keys of Options.SkipFaults.
var FaultCases = []string{"cancel", "cancel-news", "deadline", "close", "abort", "straggler"}

// FaultSettle is how long the fault suite lets the other ranks enter a
// collective (and wait in it) before the faulty rank acts.
const FaultSettle = 100 * time.Millisecond

// FaultDeadline is the straggler case's deadline: the other ranks wait
// this long for the rank that comes late (it comes FaultSettle after).
const FaultDeadline = time.Second

// faultN is the count of the fault suite's AllReduce (f32).
const faultN = 4099

// faultCause is what the abort case's rank aborts its communicator with.
func faultCause(v int) error {
	return fmt.Errorf("commtest: rank %d aborted the communicator (the fault suite's abort case)", v)
}

// faultRoles are case i's ranks: v is the faulty one, and l (≠ v) the one
// that enters only after v acted (the cancel cases).
func faultRoles(i, size int) (v, l int) {
	v = (size - 1 + 2*i) % size
	return v, (v + 1) % size
}

// FaultsRank runs the fault suite on this rank; every rank of the world
// must call it with equal Options, and the world must have 2 ranks or
// more (with one rank it returns nil at once). Each case runs on a fresh
// Split of c (every rank, color 0, key rank), closed afterwards: a
// matched AllReduce of one element, then an AllReduce of 4099 f32 that
// the others are waiting in when rank v acts (v goes round the ranks from
// case to case; l is v+1, modulo the size):
//
//   - cancel: v is in the AllReduce too, l enters 3×FaultSettle late, and
//     v's context is canceled FaultSettle after it started. v gets
//     comm.ErrCanceled; every other rank, l included, an error that
//     matches comm.ErrCanceled and comm.ErrPeerAbandoned and names v — or
//     nil with a whole result (every rank's data summed), where its part
//     had finished (v's share had gone out), and then a next call that
//     fails with comm.ErrCanceled.
//   - cancel-news: the same with l entering FaultDeadline+FaultSettle
//     late, and every rank but v and l must have its error within
//     FaultDeadline: the news of the cancel ends the collective on the
//     ranks that wait for l, too.
//   - deadline: v enters FaultSettle late with a context whose deadline
//     has passed. v gets comm.ErrTimeout; every other rank an error that
//     matches comm.ErrTimeout and comm.ErrPeerAbandoned and names v.
//   - close: v closes its communicator FaultSettle after the others
//     entered (it does not enter). Every other rank gets an error that
//     matches comm.ErrPeerFailed, whose culprit (comm.CulpritOf and
//     (*comm.OpError).Culprit) is v, and whose text says of no other rank
//     that it failed ("rank N … failed").
//   - abort: v calls Abort (comm.Control) with a cause of its own
//     FaultSettle after the others entered (it does not enter). Every
//     other rank gets an error that names v or gives the cause's text,
//     and then a Barrier that fails with comm.ErrAborted; so does v's
//     Barrier.
//   - straggler: the others' contexts have a deadline of FaultDeadline;
//     v enters FaultSettle after it passed. Every other rank gets an error
//     that matches comm.ErrTimeout and is a *comm.LateError whose Ranks
//     include v, or a peer's report of its own deadline
//     (comm.ErrPeerAbandoned) whose text says v had not started; v gets
//     an error that matches comm.ErrTimeout.
//
// After cancel, cancel-news, deadline and straggler, every rank's next
// call on the child (a Barrier) must fail within FaultDeadline with
// comm.ErrAborted and comm.ErrCanceled or comm.ErrTimeout: the rule of
// every tier (comm.EndedByDeadline) is that a collective a deadline or a
// cancel ended aborts the communicator on every rank. After the deadline
// case, where nobody failed, Shrink must give every rank a communicator
// of every rank, at its rank, whose Barrier works.
//
// An error names v when comm.PeerOf or comm.CulpritOf gives v, when it is
// a *comm.LateError whose Ranks include v, or, since news that came
// through another rank is a *comm.RemoteError that carries the first
// rank's reason as text, when its text says that rank v ended the
// collective, had not started it, or ("rank v: AllReduce #2 on …")
// returned an error of its own. Every rank logs (Options.Log) what it got
// in each case, so a run shows what each tier says. Only v's
// communicator is faulted: c stays usable.
//
// Options.SkipFaults skips a case by name (FaultCases), with the reason
// logged on every rank; a case is never skipped otherwise, and a name
// there that is not a case fails the suite.
func FaultsRank(ctx context.Context, c comm.Communicator, opt Options) error {
	o := opt.withDefaults()
	rank, size := c.Rank(), c.Size()
	r := newReport("Faults", rank, o)
	if size < 2 {
		return nil
	}
	for i, name := range FaultCases {
		if why, ok := o.SkipFaults[name]; ok {
			o.Log("commtest Faults: rank %d: %s skipped: %s", rank, name, why)
			continue
		}
		r.ran++
		v, l := faultRoles(i, size)
		if !faultStep(ctx, c, name, v, l, o, r) {
			r.stopped = "stopped after " + name
			break
		}
	}
	for name := range o.SkipFaults {
		if !slices.Contains(FaultCases, name) {
			r.fail("Faults", "Options.SkipFaults names %q, which is not a case (FaultCases: %v)", name, FaultCases)
		}
	}
	o.Log("commtest Faults: rank %d: %d cases, %d failed%s", rank, r.ran, r.failed, r.margin())
	return r.err()
}

func faultStep(ctx context.Context, c comm.Communicator, name string, v, l int, o Options, r *report) bool {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	return guard(ctx, r, "Faults/"+name, o, func(r *report) bool { return faultBody(ctx, c, name, v, l, o, r) })
}

func faultBody(ctx context.Context, c comm.Communicator, name string, v, l int, o Options, r *report) bool {
	full := "Faults/" + name
	rank, size := c.Rank(), c.Size()
	f := newFreshCase(ctx, c, full, o, r)
	if f == nil {
		return false
	}
	defer f.end(full, r)
	child, b := f.child, f.b
	// Rank-distinct small integers, whose sum a float32 holds exactly: a
	// rank whose part of a collective another rank abandoned may finish
	// it, and its result must then be whole.
	data := make([]float32, faultN)
	for i := range data {
		data[i] = float32(rank + 1 + i%7)
	}
	send, err := b.a.buffer(comm.F32, comm.Host(data).Bytes())
	if err != nil {
		r.fail(full, "%v", err)
		return false
	}
	call := comm.Call{Kind: comm.KindAllReduce, Send: send, Recv: b.buf(comm.F32, faultN), Op: comm.Sum}
	if b.err != nil {
		r.fail(full, "%v", b.err)
		return false
	}
	// whole reports whether the AllReduce's result is the sum of every
	// rank's data.
	whole := func() bool {
		got, err := b.a.read(call.Recv)
		if err != nil {
			r.fail(full, "reading the result: %v", err)
			return false
		}
		base := float32(size * (size + 1) / 2)
		for i := range faultN {
			if v := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:])); v != base+float32(size*(i%7)) {
				return false
			}
		}
		return true
	}
	// The child's first collective, matched: every rank is in the child
	// (its connections made, where it makes them lazily) before the fault.
	warm := allReduce(b, comm.F32, 1, comm.Sum)
	if b.err != nil {
		r.fail(full, "%v", b.err)
		return false
	}
	if err := child.Start(ctx, warm).Wait(); err != nil {
		r.callFailed(full+" (the matched AllReduce before it)", err)
		return false
	}
	run := func(ctx context.Context) error { return child.Start(ctx, call).Wait() }
	// The deadline rule (comm.EndedByDeadline): a collective that a
	// deadline or a cancel ended aborts the communicator on every rank,
	// so every rank's next call fails fast with comm.ErrAborted and kind.
	var kind error
	finished := false // this rank's part had finished: its result is whole
	defer func() {
		if kind != nil && wantAborted(ctx, r, full, child, kind, !finished) && name == "deadline" {
			wantWhole(ctx, r, full, child)
		}
	}()
	start := time.Now()
	got := func(err error) {
		o.Log("commtest Faults: rank %d: %s (v=%d, l=%d): after %v: %v", rank, name, v, l, time.Since(start).Round(time.Millisecond), err)
	}
	switch name {
	case "cancel", "cancel-news":
		kind = comm.ErrCanceled
		late := 3 * FaultSettle
		if name == "cancel-news" {
			late = FaultDeadline + FaultSettle
		}
		if rank == l {
			time.Sleep(late)
		}
		cctx := ctx
		if rank == v {
			var stop context.CancelFunc
			cctx, stop = context.WithCancel(ctx)
			t := time.AfterFunc(FaultSettle, stop)
			defer t.Stop()
			defer stop()
		}
		err := run(cctx)
		got(err)
		if rank == v {
			if !errors.Is(err, comm.ErrCanceled) {
				r.fail(full, "this rank's context was canceled mid-collective; it got %v; want comm.ErrCanceled", err)
			}
			return true
		}
		if err == nil && whole() {
			// v's share had gone out before the cancel: this rank's
			// part finished, and its next call learns of the abort.
			finished = true
		} else {
			wantFrom(r, full, err, v, "whose context was canceled", comm.ErrCanceled, comm.ErrPeerAbandoned)
		}
		if took := time.Since(start); name == "cancel-news" && rank != l && took >= FaultDeadline {
			r.fail(full, "rank %d's context was canceled %v in; this rank, waiting in the AllReduce while rank %d had not come, returned only after %v (rank %d came %v in): the news of the cancel must end the collective on every rank, not wait for the rank the collective waits on",
				v, FaultSettle, l, took.Round(time.Millisecond), l, late)
		}
	case "deadline":
		kind = comm.ErrTimeout
		cctx := ctx
		if rank == v {
			var stop context.CancelFunc
			cctx, stop = context.WithTimeout(ctx, FaultSettle/2)
			defer stop()
			time.Sleep(FaultSettle)
		}
		err := run(cctx)
		got(err)
		if rank == v {
			if !errors.Is(err, comm.ErrTimeout) {
				r.fail(full, "this rank's deadline had passed; it got %v; want comm.ErrTimeout", err)
			}
			return true
		}
		wantFrom(r, full, err, v, "whose deadline had passed", comm.ErrTimeout, comm.ErrPeerAbandoned)
	case "close":
		if rank == v {
			time.Sleep(FaultSettle)
			f.closed = true
			if err := child.Close(); err != nil {
				r.fail(full, "Close mid-collective: %v", err)
			}
			got(nil)
			return true
		}
		err := run(ctx)
		got(err)
		wantBlame(r, full, err, v, size)
	case "abort":
		if rank == v {
			time.Sleep(FaultSettle)
			child.Abort(faultCause(v))
			got(nil)
			if err := child.Barrier(ctx); !errors.Is(err, comm.ErrAborted) {
				r.fail(full, "this rank aborted its communicator; its next call (a Barrier) got %v; want comm.ErrAborted", err)
			}
			return true
		}
		err := run(ctx)
		got(err)
		switch {
		case err == nil:
			r.fail(full, "rank %d aborted its communicator mid-collective, and this rank's AllReduce returned nil", v)
		case !names(err, v) && !strings.Contains(err.Error(), faultCause(v).Error()):
			r.fail(full, "rank %d aborted its communicator mid-collective; this rank got %v, which does not name it (comm.PeerOf %d, comm.CulpritOf %v)",
				v, err, comm.PeerOf(err), culpritText(err))
		}
		if err := child.Barrier(ctx); !errors.Is(err, comm.ErrAborted) {
			r.fail(full, "rank %d aborted the communicator; this rank's next call (a Barrier) got %v; want comm.ErrAborted", v, err)
		}
	case "straggler":
		kind = comm.ErrTimeout
		if rank == v {
			time.Sleep(FaultDeadline + FaultSettle)
			err := run(ctx)
			got(err)
			if !errors.Is(err, comm.ErrTimeout) {
				r.fail(full, "this rank came after the others' deadline had passed; it got %v; want comm.ErrTimeout (theirs)", err)
			}
			return true
		}
		dctx, stop := context.WithTimeout(ctx, FaultDeadline)
		defer stop()
		err := run(dctx)
		got(err)
		var le *comm.LateError
		switch {
		case !errors.Is(err, comm.ErrTimeout):
			r.fail(full, "rank %d had not started the AllReduce when this rank's deadline passed; this rank got %v; want comm.ErrTimeout", v, err)
		case errors.As(err, &le) && !slices.Contains(le.Ranks, v) && !(len(le.Ranks) == 0 && slices.Contains(le.Silent, v)):
			// A composed communicator's census may not hear the
			// straggler in time (a loaded machine): naming it silent is
			// the truth then; naming another rank late is not.
			r.fail(full, "rank %d had not started the AllReduce when this rank's deadline passed; the *comm.LateError names ranks %v (silent: %v) (%v)", v, le.Ranks, le.Silent, err)
		case le == nil && !(errors.Is(err, comm.ErrPeerAbandoned) && saysRank(err, v, "had not started")):
			r.fail(full, "rank %d had not started the AllReduce when this rank's deadline passed; this rank got %v; want a *comm.LateError that names it, or a peer's report of its own deadline (comm.ErrPeerAbandoned) that says rank %d had not started", v, err, v)
		}
	}
	return true
}

// wantAborted checks the deadline rule on this rank: the collective before
// ended by a deadline or a cancel (kind), the next call on child fails
// within FaultDeadline with kind, and with comm.ErrAborted where aborted
// (the collective failed here; a rank whose part had finished learns of
// the abort in this call).
func wantAborted(ctx context.Context, r *report, name string, child comm.Communicator, kind error, aborted bool) bool {
	ctx, cancel := context.WithTimeout(ctx, FaultDeadline)
	defer cancel()
	start := time.Now()
	err := child.Barrier(ctx)
	if aborted && !errors.Is(err, comm.ErrAborted) || !errors.Is(err, kind) {
		want := fmt.Sprint(kind)
		if aborted {
			want = "comm.ErrAborted and " + want
		}
		r.fail(name, "a deadline or a cancel (%v) ended the collective; this rank's next call (a Barrier, after %v) got %v; want %s: the rule of every tier is that such a collective aborts the communicator on every rank",
			kind, time.Since(start).Round(time.Millisecond), err, want)
		return false
	}
	return true
}

// wantWhole checks how a program goes on after a deadline's abort, where
// nobody failed: Shrink gives every rank a communicator of every rank,
// at its old rank, whose Barrier works.
func wantWhole(ctx context.Context, r *report, name string, child comm.Communicator) {
	s, err := child.Shrink(ctx)
	if err != nil {
		r.fail(name, "Shrink after the deadline's abort (nobody failed): %v", err)
		return
	}
	defer s.Close()
	if s.Size() != child.Size() || s.Rank() != child.Rank() {
		r.fail(name, "Shrink after the deadline's abort (nobody failed) gave rank %d of %d; want rank %d of %d", s.Rank(), s.Size(), child.Rank(), child.Size())
		return
	}
	if err := s.Barrier(ctx); err != nil {
		r.fail(name, "a Barrier on the communicator Shrink gave after the deadline's abort: %v", err)
	}
}

// wantFrom checks that err, the error of a rank whose peer v ended the
// collective, matches every one of want and names v.
func wantFrom(r *report, name string, err error, v int, what string, want ...error) {
	if err == nil {
		r.fail(name, "rank %d, %s, ended the collective on its side, and this rank's call returned nil", v, what)
		return
	}
	for _, w := range want {
		if !errors.Is(err, w) {
			r.fail(name, "rank %d, %s, ended the collective on its side; this rank got %v; want an error that matches %v", v, what, err, w)
			return
		}
	}
	if !names(err, v) {
		r.fail(name, "rank %d, %s, ended the collective on its side; this rank got %v, which does not name it (comm.PeerOf %d, comm.CulpritOf %v)",
			v, what, err, comm.PeerOf(err), culpritText(err))
	}
}

// failedRank finds the ranks an error's text says failed.
var failedRank = regexp.MustCompile(`rank (\d+)[^;]* failed`)

// wantBlame checks that err blames v, a rank that closed its
// communicator, and no other rank.
func wantBlame(r *report, name string, err error, v, size int) {
	var oe *comm.OpError
	b, ok := comm.CulpritOf(err)
	switch {
	case !errors.Is(err, comm.ErrPeerFailed):
		r.fail(name, "rank %d closed its communicator mid-collective; this rank got %v; want comm.ErrPeerFailed", v, err)
		return
	case !ok || b.Rank != v:
		r.fail(name, "rank %d closed its communicator mid-collective; this rank got %v, whose culprit (comm.CulpritOf) is %s; want rank %d", v, err, culpritText(err), v)
		return
	case !errors.As(err, &oe):
		r.fail(name, "rank %d closed its communicator mid-collective; this rank got %v, which is not a *comm.OpError", v, err)
		return
	}
	if got, ok := oe.Culprit(); !ok || got != v {
		r.fail(name, "rank %d closed its communicator mid-collective; this rank got %v, whose OpError.Culprit() is %d, %v; want %d", v, err, got, ok, v)
		return
	}
	for _, m := range failedRank.FindAllStringSubmatch(err.Error(), -1) {
		if q, _ := strconv.Atoi(m[1]); q != v && q < size {
			r.fail(name, "rank %d closed its communicator mid-collective; this rank got %q, which says rank %d failed too", v, err, q)
			return
		}
	}
}

// names reports whether err names rank v: as comm.PeerOf's peer, as its
// culprit (comm.CulpritOf, a rank of this communicator), among a
// *comm.LateError's ranks, or, for news that came through another rank
// (a *comm.RemoteError carries the first rank's reason as text only), in
// the text as the rank that ended the collective or had not started it.
func names(err error, v int) bool {
	if comm.PeerOf(err) == v {
		return true
	}
	if b, ok := comm.CulpritOf(err); ok && b.Rank == v && !b.Outside {
		return true
	}
	var le *comm.LateError
	if errors.As(err, &le) && slices.Contains(le.Ranks, v) {
		return true
	}
	return saysRank(err, v, "ended the collective") || saysRank(err, v, "had not started") ||
		regexp.MustCompile(`(^|[^\w])rank `+strconv.Itoa(v)+`: [A-Za-z]+ #\d+ on `).MatchString(err.Error())
}

// saysRank reports whether err's text says rank v (with its place in
// parentheses, as a composed communicator gives it) did what.
func saysRank(err error, v int, what string) bool {
	re := regexp.MustCompile(`(^|[^\w])rank ` + strconv.Itoa(v) + ` (\([^()]*\) )?` + regexp.QuoteMeta(what))
	return re.MatchString(err.Error())
}

func culpritText(err error) string {
	b, ok := comm.CulpritOf(err)
	if !ok {
		return "none"
	}
	if b.Outside {
		return fmt.Sprintf("rank %d of the composed communicator", b.Rank)
	}
	return fmt.Sprintf("rank %d", b.Rank)
}

// RunFaults runs FaultsRank on every rank of an in-process world. The
// world itself is never faulted (only its Split children).
func RunFaults(t *testing.T, comms []comm.Communicator, opt Options) {
	t.Helper()
	if len(comms) < 2 {
		t.Skip("commtest: RunFaults needs 2 ranks or more")
	}
	runRankSuite(t, comms, opt, FaultsRank)
}
