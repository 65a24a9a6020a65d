package nexar

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// at is a Progress that has started collectives 1…last, collective s
// being an AllReduce of s elements.
func at(last uint64) comm.Progress {
	var p comm.Progress
	for s := uint64(1); s <= last; s++ {
		p.Record(s, comm.Signature{Kind: comm.KindAllReduce, DType: comm.F32, Op: comm.Sum, Root: -1, Count: int64(s)})
	}
	return p
}

// The progress census: every rank answers what its owner installed (its
// last started collective and its latest calls, whole), also outside any
// collective; a rank with nothing installed or one that has closed counts
// as not answered, and the census ends when every live rank has replied,
// not at its deadline.
func TestProgressCensus(t *testing.T) {
	cs := memWorld(t, 4, Options{Timeout: time.Minute})
	cs[0].SetProgress(func() comm.Progress { return at(5) })
	cs[1].SetProgress(func() comm.Progress { return at(7) })
	// cs[2] installs nothing.
	cs[3].SetProgress(func() comm.Progress { return at(12) })
	if _, ok := cs[3].SetProgress(func() comm.Progress { return at(99) }); ok {
		t.Errorf("a second SetProgress installed over the first")
	}
	remove, ok := cs[2].SetProgress(func() comm.Progress { return at(8) })
	if !ok {
		t.Fatalf("SetProgress on rank 2 installed nothing")
	}
	remove() // rank 2 answers nothing again
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	answers, answered := cs[0].Progress(ctx)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the census took %v: it waited for its deadline, not for the replies", took)
	}
	if want := []comm.Progress{at(5), at(7), {}, at(12)}; !slices.Equal(answers, want) {
		t.Errorf("answers = %v, want %v", answers, want)
	}
	if want := []bool{true, true, false, true}; !slices.Equal(answered, want) {
		t.Errorf("answered = %v, want %v", answered, want)
	}

	if err := cs[3].Close(); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	_, answered = cs[1].Progress(ctx2)
	if want := []bool{true, true, false, false}; !slices.Equal(answered, want) {
		t.Errorf("after rank 3 closed: answered = %v, want %v", answered, want)
	}
}
