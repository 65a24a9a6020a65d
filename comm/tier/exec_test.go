package tier_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// goid is the calling goroutine's id, from its stack header.
func goid() string {
	var b [64]byte
	n := runtime.Stack(b[:], false)
	return strings.Fields(string(b[:n]))[1]
}

// run is what the tests' tasks record.
type run struct {
	seq uint64
	gid string
}

// recorder is an executor whose Run records each task and, while gate is
// open (nil), returns at once; a task whose X is a channel waits for it.
type recorder struct {
	mu   sync.Mutex
	runs []run
}

func (r *recorder) exec(cfg tier.ExecConfig[chan struct{}]) *tier.Exec[chan struct{}] {
	cfg.Run = func(t *tier.Task[chan struct{}]) error {
		if t.X != nil {
			<-t.X
		}
		r.mu.Lock()
		r.runs = append(r.runs, run{seq: t.Seq, gid: goid()})
		r.mu.Unlock()
		if t.Err != nil {
			return fmt.Errorf("refused #%d: %w", t.Seq, t.Err)
		}
		return nil
	}
	return tier.NewExec(cfg)
}

func (r *recorder) seqs() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []uint64
	for _, x := range r.runs {
		s = append(s, x.seq)
	}
	return s
}

var barrier = comm.Call{Kind: comm.KindBarrier}

func TestExecDoRunsInline(t *testing.T) {
	var r recorder
	e := r.exec(tier.ExecConfig[chan struct{}]{})
	me := goid()
	for range 3 {
		if err := e.Do(context.Background(), barrier, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range r.runs {
		if x.gid != me {
			t.Errorf("task #%d ran on goroutine %s, want the caller's (%s): a blocking call on an idle executor runs inline", x.seq, x.gid, me)
		}
	}
	if got := r.seqs(); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Errorf("sequence numbers %v, want [1 2 3]", got)
	}
}

func TestExecOrderAndHandOff(t *testing.T) {
	var r recorder
	e := r.exec(tier.ExecConfig[chan struct{}]{})
	gate := make(chan struct{})
	w1 := e.Start(context.Background(), barrier, nil, gate) // holds the runner
	w2 := e.Start(context.Background(), barrier, nil, nil)
	done := make(chan error, 1)
	go func() { done <- e.Do(context.Background(), barrier, nil, nil) }() // queued: not inline
	w4 := e.Start(context.Background(), barrier, nil, nil)
	time.Sleep(20 * time.Millisecond)
	if got := r.seqs(); len(got) != 0 {
		t.Fatalf("ran %v while the first task was held", got)
	}
	close(gate)
	for _, w := range []*comm.Work{w1, w2, w4} {
		if err := w.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Do's task and Start's after it are numbered in call order; Do may
	// have been numbered before or after w4, but the runs follow the
	// numbers.
	if got := r.seqs(); !slices.Equal(got, []uint64{1, 2, 3, 4}) {
		t.Errorf("ran %v, want [1 2 3 4] (the order of Start)", got)
	}
	e.Close()
	e.Wait()
}

func TestExecCloseRefusesQueuedAndLater(t *testing.T) {
	var r recorder
	e := r.exec(tier.ExecConfig[chan struct{}]{
		Refuse: func(t *tier.Task[chan struct{}], err error) error { return fmt.Errorf("task #%d: %w", t.Seq, err) },
	})
	gate := make(chan struct{})
	w1 := e.Start(context.Background(), barrier, nil, gate)
	w2 := e.Start(context.Background(), barrier, nil, nil)
	time.Sleep(10 * time.Millisecond) // w1 is running
	if !e.Close() || e.Close() {
		t.Fatal("Close: want true on the first call only")
	}
	if err := w2.Wait(); !errors.Is(err, comm.ErrClosed) || !strings.Contains(err.Error(), "task #2") {
		t.Errorf("queued task at Close: %v, want ErrClosed through Refuse", err)
	}
	if err := e.Do(context.Background(), barrier, nil, nil); !errors.Is(err, comm.ErrClosed) || !strings.Contains(err.Error(), "task #0") {
		t.Errorf("Do after Close: %v, want ErrClosed, unnumbered", err)
	}
	if err := e.Start(context.Background(), barrier, nil, nil).Wait(); !errors.Is(err, comm.ErrClosed) {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
	waited := make(chan struct{})
	go func() { e.Wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("Wait returned while a task was running")
	case <-time.After(20 * time.Millisecond):
	}
	close(gate)
	<-waited
	if err := w1.Wait(); err != nil {
		t.Errorf("the running task: %v, want its own result", err)
	}
	if got := r.seqs(); !slices.Equal(got, []uint64{1}) {
		t.Errorf("ran %v, want only [1]", got)
	}
}

func TestExecRefusalStillRuns(t *testing.T) {
	var r recorder
	e := r.exec(tier.ExecConfig[chan struct{}]{})
	bad := errors.New("bad argument")
	if err := e.Do(context.Background(), barrier, bad, nil); !errors.Is(err, bad) {
		t.Errorf("Do with a refusal: %v, want the refusal through Run", err)
	}
	if got := r.seqs(); !slices.Equal(got, []uint64{1}) {
		t.Errorf("ran %v: a refused task takes its number and runs (the tier tells the peers)", got)
	}
}

func TestExecAdmit(t *testing.T) {
	var r recorder
	var lock sync.Mutex
	var admitted []uint64
	full := errors.New("admission refused")
	e := r.exec(tier.ExecConfig[chan struct{}]{
		Locker: &lock,
		Admit: func(t *tier.Task[chan struct{}]) error {
			if lock.TryLock() {
				panic("Admit ran without the Locker held")
			}
			admitted = append(admitted, t.Seq)
			if t.Seq == 2 {
				return full
			}
			return nil
		},
	})
	for i := range 3 {
		err := e.Do(context.Background(), barrier, nil, nil)
		if (i == 1) != errors.Is(err, full) {
			t.Errorf("call %d: %v", i+1, err)
		}
	}
	if !slices.Equal(admitted, []uint64{1, 2, 3}) || !slices.Equal(r.seqs(), []uint64{1, 3}) {
		t.Errorf("admitted %v, ran %v; want [1 2 3] and [1 3]", admitted, r.seqs())
	}
}

func TestExecConcurrent(t *testing.T) {
	var r recorder
	e := r.exec(tier.ExecConfig[chan struct{}]{Concurrent: true})
	gate := make(chan struct{})
	w1 := e.Start(context.Background(), barrier, nil, gate)
	// A blocking call does not wait for the held one, and runs inline.
	me := goid()
	if err := e.Do(context.Background(), barrier, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := r.runs; len(got) != 1 || got[0].seq != 2 || got[0].gid != me {
		t.Errorf("runs %v: want #2 alone, on the caller's goroutine %s", got, me)
	}
	close(gate)
	if err := w1.Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestExecDetach(t *testing.T) {
	later := make(chan func(error), 2)
	e := tier.NewExec(tier.ExecConfig[int]{
		Run: func(t *tier.Task[int]) error {
			later <- t.Detach()
			return errors.New("ignored: the task was detached")
		},
	})
	go func() {
		(<-later)(nil)
		(<-later)(errors.New("the device failed"))
	}()
	if err := e.Do(context.Background(), barrier, nil, 0); err != nil {
		t.Errorf("inline detached task: %v, want its completion's nil", err)
	}
	if err := e.Start(context.Background(), barrier, nil, 0).Wait(); err == nil || err.Error() != "the device failed" {
		t.Errorf("started detached task: %v, want its completion's error", err)
	}
}

// A blocking call on an idle executor costs no goroutine hop; this shows
// the difference against Start + Wait.
func BenchmarkExec(b *testing.B) {
	e := tier.NewExec(tier.ExecConfig[int]{Run: func(*tier.Task[int]) error { return nil }})
	ctx := context.Background()
	b.Run("Do", func(b *testing.B) {
		for b.Loop() {
			_ = e.Do(ctx, barrier, nil, 0)
		}
	})
	b.Run("StartWait", func(b *testing.B) {
		for b.Loop() {
			_ = e.Start(ctx, barrier, nil, 0).Wait()
		}
	})
}

// With Recycle, a blocking call that ran inline leaves its task for the
// next one, blanked (no allocation per call): nothing of one call (its X,
// its refusal) shows in the next. (The pool may drop a task, as the race
// detector's does on purpose: some are reused, not all.)
func TestExecRecycle(t *testing.T) {
	for _, recycle := range []bool{false, true} {
		var seen []*tier.Task[*int]
		var stale []string
		e := tier.NewExec(tier.ExecConfig[*int]{Recycle: recycle, Run: func(tk *tier.Task[*int]) error {
			seen = append(seen, tk)
			if tk.X == nil || *tk.X != int(tk.Seq) {
				stale = append(stale, fmt.Sprintf("task #%d has X %v", tk.Seq, tk.X))
			}
			if tk.Err != nil && tk.Seq != 3 {
				stale = append(stale, fmt.Sprintf("task #%d has Err %v", tk.Seq, tk.Err))
			}
			return tk.Err
		}})
		for i := 1; i <= 20; i++ {
			var verr error
			if i == 3 {
				verr = errors.New("refused")
			}
			x := i
			err := e.Do(context.Background(), barrier, verr, &x)
			if (err != nil) != (i == 3) {
				t.Fatalf("Recycle %v: call %d: %v", recycle, i, err)
			}
		}
		if len(stale) > 0 {
			t.Errorf("Recycle %v: %v", recycle, stale)
		}
		distinct := map[*tier.Task[*int]]bool{}
		for _, tk := range seen {
			distinct[tk] = true
		}
		if reused := len(distinct) < len(seen); reused != recycle {
			t.Errorf("Recycle %v: %d distinct tasks for %d calls", recycle, len(distinct), len(seen))
		}
	}
}
