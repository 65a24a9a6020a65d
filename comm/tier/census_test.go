package tier

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// call is an AllReduce of n floats, or, for a negative n, a Broadcast of
// -n from root 0: two calls that a composed communicator routes apart.
func call(n int) comm.Signature {
	if n < 0 {
		return comm.Signature{Kind: comm.KindBroadcast, DType: comm.F32, Root: 0, Count: int64(-n)}
	}
	return comm.Signature{Kind: comm.KindAllReduce, DType: comm.F32, Op: comm.Sum, Root: -1, Count: int64(n)}
}

// progressOf is a Progress that started the calls of ns in order.
func progressOf(ns ...int) comm.Progress {
	var p comm.Progress
	for i, n := range ns {
		p.Record(uint64(i+1), call(n))
	}
	return p
}

func TestProgressRemembersTheLatestCalls(t *testing.T) {
	var p comm.Progress
	if _, ok := p.Call(0); ok {
		t.Errorf("a Progress that started nothing knows collective 0")
	}
	for s := uint64(1); s <= 20; s++ {
		p.Record(s, call(int(s)))
	}
	for s := uint64(0); s <= 22; s++ {
		got, ok := p.Call(s)
		want := s > 20-comm.CensusWindow && s <= 20
		if ok != want || (ok && got != call(int(s))) {
			t.Errorf("Call(%d) = %v, %t; want %t (call %v)", s, got, ok, want, call(int(s)))
		}
	}
	q := comm.Progress{}
	q.Record(1, comm.Signature{Kind: comm.KindBarrier, Outer: OuterAt(comm.Signature{Kind: comm.KindBarrier}, 1)})
	if c, _ := q.Call(1); c.Outer != (comm.Outer{}) {
		t.Errorf("Record kept the phases' Outer %v: a census compares the users' calls", c.Outer)
	}
}

func TestProgressWireForm(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var p comm.Progress
		for s := range uint64(r.IntN(30)) {
			p.Record(s+1, comm.Signature{Kind: comm.Kind(1 + r.IntN(14)), DType: comm.DType(r.IntN(11)), Op: comm.ReduceOp(r.IntN(6)),
				Root: int32(r.IntN(9)) - 1, Count: r.Int64N(1<<40) - 1})
		}
		p.Stopped = r.IntN(2) == 0
		got, err := DecodeProgress(AppendProgress(nil, p))
		if err != nil || got != p {
			t.Fatalf("DecodeProgress(AppendProgress(%+v)) = %+v, %v", p, got, err)
		}
	}
	// The last sequence numbers there are: the calls' loops must end at
	// Started, not wrap past it (a fuzzed answer from a peer found both
	// loops did: testdata/fuzz/FuzzDecodeProgress).
	for _, last := range []uint64{math.MaxUint64, math.MaxUint64 - 1, comm.CensusWindow} {
		var p comm.Progress
		for s := last - 2; s <= last && s >= last-2; s++ {
			p.Record(s, call(int(s%7)))
			if s == last {
				break
			}
		}
		got, err := DecodeProgress(AppendProgress(nil, p))
		if err != nil || got != p {
			t.Fatalf("Started %d: DecodeProgress(AppendProgress(%+v)) = %+v, %v", last, p, got, err)
		}
	}
	good := AppendProgress(nil, progressOf(1, 2, 3))
	for _, bad := range [][]byte{nil, good[:8], good[:len(good)-1], append(good, 0),
		append(AppendProgress(nil, progressOf()), 1)} {
		if _, err := DecodeProgress(bad); err == nil {
			t.Errorf("DecodeProgress(%x) accepted a malformed answer", bad)
		}
	}
}

func FuzzDecodeProgress(f *testing.F) {
	f.Add(AppendProgress(nil, progressOf(1, -2, 3)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeProgress(b)
		if err != nil {
			return
		}
		again, err := DecodeProgress(AppendProgress(nil, p))
		if err != nil || again != p {
			t.Fatalf("a decoded answer %+v does not survive its own wire form: %+v, %v", p, again, err)
		}
	})
}

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mine     comm.Progress
		seq      uint64
		answers  []comm.Progress
		answered []bool
		want     *comm.MismatchError // Peer, Seq, Local, Remote
	}{
		{name: "everyone agrees",
			mine: progressOf(4, 5), seq: 2,
			answers: []comm.Progress{progressOf(4, 5), {}, progressOf(4, 5)}, answered: []bool{true, true, true}},
		{name: "a late rank is not a mismatch",
			mine: progressOf(4, 5), seq: 2,
			answers: []comm.Progress{progressOf(4, 5), {}, progressOf(4)}, answered: []bool{true, true, true}},
		{name: "the odd rank is named, with both calls",
			mine: progressOf(4, 5), seq: 2,
			answers: []comm.Progress{progressOf(4, 5), {}, progressOf(4, -5)}, answered: []bool{true, true, true},
			want: &comm.MismatchError{Peer: 2, Seq: 2, Local: call(5), Remote: call(-5)}},
		{name: "the odd rank names the lowest other",
			mine: progressOf(4, -5), seq: 2,
			answers: []comm.Progress{progressOf(4, 5), {}, progressOf(4, 5)}, answered: []bool{true, true, true},
			want: &comm.MismatchError{Peer: 0, Seq: 2, Local: call(-5), Remote: call(5)}},
		{name: "the first collective that differs, not the current one",
			mine: progressOf(4, -5, 6), seq: 3,
			answers: []comm.Progress{progressOf(4, 5, 6), {}, progressOf(4, 5)}, answered: []bool{true, true, true},
			want: &comm.MismatchError{Peer: 0, Seq: 2, Local: call(-5), Remote: call(5)}},
		{name: "no verdict while a rank is still before the collective that differs",
			mine: progressOf(4, 5), seq: 2,
			answers: []comm.Progress{progressOf(4, -5), {}, progressOf(4)}, answered: []bool{true, true, true}},
		{name: "the verdict once every rank that answered has started it",
			mine: progressOf(4, 5), seq: 2,
			answers: []comm.Progress{progressOf(4, -5), {}, progressOf(4, 5, 6)}, answered: []bool{true, true, true},
			want: &comm.MismatchError{Peer: 0, Seq: 2, Local: call(5), Remote: call(-5)}},
		{name: "a rank that stopped is not behind",
			mine: progressOf(4, 5), seq: 2,
			answers: []comm.Progress{progressOf(4, -5), {}, {Started: 1, Calls: progressOf(4).Calls, Stopped: true}}, answered: []bool{true, true, true},
			want: &comm.MismatchError{Peer: 0, Seq: 2, Local: call(5), Remote: call(-5)}},
		{name: "a call refused (unknown) mismatches nothing",
			mine: progressOf(4, 5), seq: 2,
			answers: []comm.Progress{func() comm.Progress { p := progressOf(4); p.Record(2, comm.Signature{}); return p }(), {}, progressOf(4, 5)}, answered: []bool{true, true, true}},
		{name: "a rank that did not answer says nothing",
			mine: progressOf(4, 5), seq: 2,
			answers: []comm.Progress{progressOf(4, 6), {}, {}}, answered: []bool{false, true, true}},
		{name: "beyond the window nothing is compared",
			mine: progressOf(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), seq: 10,
			answers: []comm.Progress{progressOf(-1, 2, 3, 4, 5, 6, 7, 8, 9, 10), {}}, answered: []bool{true, true}},
		{name: "a rank ahead is compared where both remember",
			mine: progressOf(1, 2), seq: 2,
			answers: []comm.Progress{progressOf(1, -2, 3, 4), {}}, answered: []bool{true, true},
			want: &comm.MismatchError{Peer: 0, Seq: 2, Local: call(2), Remote: call(-2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := Judge(1, tc.mine, tc.seq, tc.answers, tc.answered) // this rank is rank 1

			switch {
			case tc.want == nil && got != nil:
				t.Errorf("Judge = %v, want no mismatch", got)
			case tc.want != nil && (got == nil || *got != *tc.want):
				t.Errorf("Judge = %+v, want %+v", got, tc.want)
			}
		})
	}
}
