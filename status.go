package hiercomm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/hiercomm/hiercomm/comm"
)

// The status file tells a launcher which rank's failure caused the
// others': `hiercomm run` sets HIERCOMM_STATUS_FILE in every rank's
// environment, and the first error of a World's call (one made through the
// World itself, not through w.Communicator or a Split of it) that blames a
// rank (comm.CulpritOf) or names stragglers (*comm.LateError) appends one
// line to that file, once per process. A rank whose failure is
// its own (its program returned an error, panicked, exited) writes
// nothing; the survivors it leaves behind name it. A World made by Shrink
// writes no such line (its ranks are no longer the ones the launcher
// started); the Shrink itself writes, on every survivor, the launched
// ranks it left behind (StatusReport.Shrunk).

// EnvStatusFile is the environment variable that names the status file
// (set by `hiercomm run`; read from the process environment, not through
// Options.Getenv). Unset: nothing is written.
const EnvStatusFile = "HIERCOMM_STATUS_FILE"

// StatusReport is one line of the status file: "RANK failed CULPRIT HOW",
// "RANK late R1[,R2...] HOW" or "RANK shrunk R1[,R2...] HOW", where RANK
// is the World rank that wrote it, HOW the rest of the line, and ranks are
// decimal, as the launcher numbered them.
//
// A World's Shrink writes the third on every survivor: the ranks the
// shrunk World no longer has. A launcher that sees every rank that failed
// shrunk past, and every other rank exit 0, may count the job a success:
// an elastic job absorbed the failure (`hiercomm run --elastic`).
type StatusReport struct {
	// Rank is the rank whose error it is, or that shrank.
	Rank int
	// Late says that Ranks had not started the collective in which Rank's
	// deadline passed (a *comm.LateError); Shrunk that Rank's World shrank
	// past Ranks (every one of them gone); without either, Ranks is the
	// one rank Rank's error blames (comm.CulpritOf), possibly Rank itself
	// (it was expelled by its peers).
	Late   bool
	Shrunk bool
	Ranks  []int
	// How is what happened, in Rank's words: the Blame's How, or the
	// LateError's text. The line has each run of white space in it,
	// newlines included, as one space.
	How string
}

// String is the report's line, without the newline.
func (r StatusReport) String() string {
	kind := "failed"
	switch {
	case r.Late:
		kind = "late"
	case r.Shrunk:
		kind = "shrunk"
	}
	ranks := make([]string, len(r.Ranks))
	for i, p := range r.Ranks {
		ranks[i] = strconv.Itoa(p)
	}
	line := fmt.Sprintf("%d %s %s", r.Rank, kind, strings.Join(ranks, ","))
	if how := strings.Join(strings.Fields(r.How), " "); how != "" {
		line += " " + how
	}
	return line
}

// ParseStatusReport reads one line of the status file (without its
// newline).
func ParseStatusReport(line string) (StatusReport, error) {
	bad := func(why string) (StatusReport, error) {
		return StatusReport{}, fmt.Errorf("status line %q: %s; want \"RANK failed CULPRIT HOW\", \"RANK late R1[,R2...] HOW\" or \"RANK shrunk R1[,R2...] HOW\"", line, why)
	}
	f := strings.SplitN(line, " ", 4)
	if len(f) < 3 {
		return bad(fmt.Sprintf("%d fields", len(f)))
	}
	var r StatusReport
	var err error
	if r.Rank, err = strconv.Atoi(f[0]); err != nil || r.Rank < 0 {
		return bad(fmt.Sprintf("rank %q is not a rank", f[0]))
	}
	switch f[1] {
	case "failed":
	case "late":
		r.Late = true
	case "shrunk":
		r.Shrunk = true
	default:
		return bad(fmt.Sprintf("kind %q is not failed, late or shrunk", f[1]))
	}
	for _, s := range strings.Split(f[2], ",") {
		p, err := strconv.Atoi(s)
		if err != nil || p < 0 {
			return bad(fmt.Sprintf("rank %q is not a rank", s))
		}
		r.Ranks = append(r.Ranks, p)
	}
	if !r.Late && !r.Shrunk && len(r.Ranks) != 1 {
		return bad(fmt.Sprintf("%d ranks blamed, want one", len(r.Ranks)))
	}
	if len(f) == 4 {
		r.How = f[3]
	}
	return r, nil
}

// statusReportOf is the report of rank's error, if it blames a rank or
// names stragglers.
func statusReportOf(rank int, err error) (StatusReport, bool) {
	if b, ok := comm.CulpritOf(err); ok && b.Rank >= 0 && !b.Outside {
		return StatusReport{Rank: rank, Ranks: []int{b.Rank}, How: b.How}, true
	}
	var le *comm.LateError
	if errors.As(err, &le) && len(le.Ranks) > 0 {
		return StatusReport{Rank: rank, Late: true, Ranks: le.Ranks, How: le.Error()}, true
	}
	return StatusReport{}, false
}

// statusPath is the status file's path, read once; "" when unset.
var statusPath = sync.OnceValue(func() string { return os.Getenv(EnvStatusFile) })

// statusWritten says whether this process has written its line.
var statusWritten struct {
	sync.Mutex
	done bool
}

// report writes err's line to the status file when it is the first of
// this process that blames a rank or names stragglers, and returns err.
func (w *World) report(err error) error {
	if err == nil || statusPath() == "" || w.launch.WorldSize != w.Size() {
		return err
	}
	r, ok := statusReportOf(w.Rank(), err)
	if !ok {
		return err
	}
	statusWritten.Lock()
	defer statusWritten.Unlock()
	if statusWritten.done {
		return err
	}
	statusWritten.done = true
	if werr := appendStatus(statusPath(), r); werr != nil {
		w.log.Warn("hiercomm: could not tell the launcher which rank failed", "file", statusPath(), "err", werr)
	}
	return err
}

// reportShrink writes, on a survivor of a Shrink of w that made nw, the
// line that says which of the launched ranks nw no longer has.
func (w *World) reportShrink(nw *World) {
	if statusPath() == "" {
		return
	}
	kept := make(map[int]bool, nw.Size())
	for r := range nw.Size() {
		kept[nw.launchedRank(r)] = true
	}
	var gone []int
	for r := range w.Size() {
		if l := w.launchedRank(r); !kept[l] {
			gone = append(gone, l)
		}
	}
	if len(gone) == 0 {
		return
	}
	r := StatusReport{Rank: w.launchedRank(w.rank), Shrunk: true, Ranks: gone, How: fmt.Sprintf("shrank from %d ranks to %d", w.Size(), nw.Size())}
	if err := appendStatus(statusPath(), r); err != nil {
		w.log.Warn("hiercomm: could not tell the launcher which ranks the world shrank past", "file", statusPath(), "err", err)
	}
}

// launchedRank is the rank the launcher gave the process that is rank r
// of w (a World made by Shrink renumbers its ranks).
func (w *World) launchedRank(r int) int {
	if w.launched == nil {
		return r
	}
	return w.launched[r]
}

// appendStatus appends r's line to the status file at path, which the
// launcher made.
func appendStatus(path string, r StatusReport) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(r.String() + "\n")
	return errors.Join(err, f.Close())
}

// The World's collectives, Send, Recv, Start, StartBatch and Split are
// w.Communicator's, with each error also given to report, and each call
// traced at LevelTrace (trace.go).

func (w *World) Start(ctx context.Context, c comm.Call) *comm.Work {
	work := w.Communicator.Start(ctx, c)
	if w.tracing {
		work = work.Map(w.tracer(ctx, c))
	}
	if statusPath() == "" {
		return work
	}
	return work.Map(w.report)
}

// StartBatch implements comm.BatchStarter. Where the World's
// communicator runs a batch natively (an nccl.Comm: one NCCL group), the
// World hands it the whole batch, and each of its calls is traced with
// the batch's outcome; elsewhere the batch runs call by call through
// Start (comm.StartEach), each call traced and reported on its own.
func (w *World) StartBatch(ctx context.Context, calls []comm.Call) *comm.Work {
	native, ok := w.Communicator.(comm.BatchStarter)
	if !ok {
		return comm.StartEach(ctx, w, calls)
	}
	var traces []func(error) error
	if w.tracing {
		for _, c := range calls {
			traces = append(traces, w.tracer(ctx, c))
		}
	}
	work := native.StartBatch(ctx, calls)
	if traces != nil {
		work = work.Map(func(err error) error {
			for _, done := range traces {
				done(err)
			}
			return err
		})
	}
	if statusPath() == "" {
		return work
	}
	return work.Map(w.report)
}

func (w *World) AllReduce(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp) error {
	return w.call(ctx, comm.Call{Kind: comm.KindAllReduce, Send: send, Recv: recv, Op: op}, func() error {
		return w.Communicator.AllReduce(ctx, send, recv, op)
	})
}

func (w *World) Broadcast(ctx context.Context, buf comm.Buffer, root int) error {
	return w.call(ctx, comm.Call{Kind: comm.KindBroadcast, Send: buf, Recv: buf, Root: root}, func() error {
		return w.Communicator.Broadcast(ctx, buf, root)
	})
}

func (w *World) Reduce(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp, root int) error {
	return w.call(ctx, comm.Call{Kind: comm.KindReduce, Send: send, Recv: recv, Op: op, Root: root}, func() error {
		return w.Communicator.Reduce(ctx, send, recv, op, root)
	})
}

func (w *World) AllGather(ctx context.Context, send, recv comm.Buffer) error {
	return w.call(ctx, comm.Call{Kind: comm.KindAllGather, Send: send, Recv: recv}, func() error {
		return w.Communicator.AllGather(ctx, send, recv)
	})
}

func (w *World) ReduceScatter(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp) error {
	return w.call(ctx, comm.Call{Kind: comm.KindReduceScatter, Send: send, Recv: recv, Op: op}, func() error {
		return w.Communicator.ReduceScatter(ctx, send, recv, op)
	})
}

func (w *World) AllToAll(ctx context.Context, send, recv comm.Buffer) error {
	return w.call(ctx, comm.Call{Kind: comm.KindAllToAll, Send: send, Recv: recv}, func() error {
		return w.Communicator.AllToAll(ctx, send, recv)
	})
}

func (w *World) AllToAllV(ctx context.Context, send comm.Buffer, sendCounts []int, recv comm.Buffer, recvCounts []int) error {
	c := comm.Call{Kind: comm.KindAllToAllV, Send: send, Recv: recv, SendCounts: sendCounts, RecvCounts: recvCounts}
	return w.call(ctx, c, func() error {
		return w.Communicator.AllToAllV(ctx, send, sendCounts, recv, recvCounts)
	})
}

func (w *World) Gather(ctx context.Context, send, recv comm.Buffer, root int) error {
	return w.call(ctx, comm.Call{Kind: comm.KindGather, Send: send, Recv: recv, Root: root}, func() error {
		return w.Communicator.Gather(ctx, send, recv, root)
	})
}

func (w *World) Scatter(ctx context.Context, send, recv comm.Buffer, root int) error {
	return w.call(ctx, comm.Call{Kind: comm.KindScatter, Send: send, Recv: recv, Root: root}, func() error {
		return w.Communicator.Scatter(ctx, send, recv, root)
	})
}

func (w *World) Scan(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp) error {
	return w.call(ctx, comm.Call{Kind: comm.KindScan, Send: send, Recv: recv, Op: op}, func() error {
		return w.Communicator.Scan(ctx, send, recv, op)
	})
}

func (w *World) ExScan(ctx context.Context, send, recv comm.Buffer, op comm.ReduceOp) error {
	return w.call(ctx, comm.Call{Kind: comm.KindExScan, Send: send, Recv: recv, Op: op}, func() error {
		return w.Communicator.ExScan(ctx, send, recv, op)
	})
}

func (w *World) Send(ctx context.Context, buf comm.Buffer, peer, tag int) error {
	return w.call(ctx, comm.Call{Kind: comm.KindSend, Send: buf, Peer: peer, Tag: tag}, func() error {
		return w.Communicator.Send(ctx, buf, peer, tag)
	})
}

func (w *World) Recv(ctx context.Context, buf comm.Buffer, peer, tag int) error {
	return w.call(ctx, comm.Call{Kind: comm.KindRecv, Recv: buf, Peer: peer, Tag: tag}, func() error {
		return w.Communicator.Recv(ctx, buf, peer, tag)
	})
}

func (w *World) Barrier(ctx context.Context) error {
	return w.call(ctx, comm.Call{Kind: comm.KindBarrier}, func() error { return w.Communicator.Barrier(ctx) })
}

func (w *World) Split(ctx context.Context, color, key int) (comm.Communicator, error) {
	c, err := w.Communicator.Split(ctx, color, key)
	return c, w.report(err)
}
