package tier_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// board is an in-process world for Agree: every call of a round posts
// this rank's bytes and waits for every rank's.
type board struct {
	mu    sync.Mutex
	cond  *sync.Cond
	size  int
	posts map[int][][]byte // round → each rank's post
}

// boardRank is one rank of a board: AllReduce (max, on uint64) and
// Broadcast are all Agree calls of it (the rest of comm.Communicator is
// nil and panics if called). fail, if set, is what its AllReduce returns,
// without posting.
type boardRank struct {
	comm.Communicator
	b     *board
	rank  int
	round int
	fail  error
}

func newBoard(size int) []*boardRank {
	b := &board{size: size, posts: map[int][][]byte{}}
	b.cond = sync.NewCond(&b.mu)
	rs := make([]*boardRank, size)
	for r := range rs {
		rs[r] = &boardRank{b: b, rank: r}
	}
	return rs
}

func (r *boardRank) Rank() int { return r.rank }
func (r *boardRank) Size() int { return r.b.size }

// exchange posts p and returns every rank's post of this round.
func (r *boardRank) exchange(p []byte) [][]byte {
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	round := r.round
	r.round++
	if b.posts[round] == nil {
		b.posts[round] = make([][]byte, b.size)
	}
	b.posts[round][r.rank] = slices.Clone(p)
	b.cond.Broadcast()
	for slices.ContainsFunc(b.posts[round], func(p []byte) bool { return p == nil }) {
		b.cond.Wait()
	}
	return b.posts[round]
}

func (r *boardRank) AllReduce(_ context.Context, send, recv comm.Buffer, op comm.ReduceOp) error {
	if r.fail != nil {
		return r.fail
	}
	if op != comm.Max || send.DType() != comm.U64 {
		return fmt.Errorf("board: AllReduce %v on %v", op, send.DType())
	}
	all := r.exchange(send.Bytes()) // first: send and recv may be one buffer
	out := recv.Bytes()
	clear(out)
	for _, p := range all {
		for i := 0; i < len(out); i += 8 {
			if v := binary.LittleEndian.Uint64(p[i:]); v > binary.LittleEndian.Uint64(out[i:]) {
				binary.LittleEndian.PutUint64(out[i:], v)
			}
		}
	}
	return nil
}

func (r *boardRank) Broadcast(_ context.Context, buf comm.Buffer, root int) error {
	copy(buf.Bytes(), r.exchange(buf.Bytes())[root])
	return nil
}

// agreeOn runs Agree on every rank of rs, rank r with errs[r] and
// fields(r), and returns what each got.
func agreeOn(rs []*boardRank, errs []error, fields func(r int) []tier.Field) []error {
	got := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() { got[i] = tier.Agree(context.Background(), r, errs[i], fields(i)...) })
	}
	wg.Wait()
	return got
}

func sameFields(int) []tier.Field {
	return []tier.Field{{Name: "A", Value: []byte("a")}, {Name: "B", Value: []byte{}}}
}

// With no rank failed and every field equal, every rank agrees.
func TestAgree(t *testing.T) {
	for r, err := range agreeOn(newBoard(4), make([]error, 4), sameFields) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// Fields that differ on one rank are named on every rank, in the
// callers' order, and only those.
func TestAgreeNamesTheFieldsThatDiffer(t *testing.T) {
	got := agreeOn(newBoard(3), make([]error, 3), func(r int) []tier.Field {
		f := []tier.Field{{Name: "A", Value: []byte("a")}, {Name: "B", Value: []byte("b")}, {Name: "C", Value: []byte("c")}, {Name: "D", Value: []byte("d")}}
		if r == 2 {
			f[1].Value, f[3].Value = []byte("B"), nil
		}
		return f
	})
	for r, err := range got {
		var differ *tier.FieldsDifferError
		if !errors.As(err, &differ) || !slices.Equal(differ.Fields, []string{"B", "D"}) {
			t.Errorf("rank %d: %v, want a *FieldsDifferError naming B and D", r, err)
		}
	}
}

// A failed rank gets its own error; every other rank the lowest failed
// rank's, its text cut at 512 bytes; a rank's failure wins over fields
// that differ.
func TestAgreeTellsWhyTheLowestFailedRankFailed(t *testing.T) {
	long := errors.New("rank one's reason: " + strings.Repeat("é", 600))
	errs := []error{nil, long, errors.New("rank two's reason"), nil}
	got := agreeOn(newBoard(4), errs, func(r int) []tier.Field {
		return []tier.Field{{Name: "A", Value: []byte{byte(r)}}}
	})
	want := "rank 1 failed at this step: " + strings.ToValidUTF8(long.Error()[:512], "")
	for r, err := range got {
		switch {
		case errs[r] != nil && err != errs[r]:
			t.Errorf("rank %d: %v, want its own error", r, err)
		case errs[r] == nil && (err == nil || err.Error() != want):
			t.Errorf("rank %d: %v\nwant %q", r, err, want)
		}
	}
}

// A failure of the agreement's collective is returned, joined with the
// rank's own error.
func TestAgreeReturnsTheCollectivesFailure(t *testing.T) {
	rs := newBoard(2)
	for _, r := range rs {
		r.fail = comm.ErrAborted
	}
	own := errors.New("its own")
	got := agreeOn(rs, []error{own, nil}, sameFields)
	if !errors.Is(got[0], own) || !errors.Is(got[0], comm.ErrAborted) {
		t.Errorf("rank 0: %v, want its own error joined with ErrAborted", got[0])
	}
	if !errors.Is(got[1], comm.ErrAborted) {
		t.Errorf("rank 1: %v, want ErrAborted", got[1])
	}
}
