package nccl

import (
	"errors"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// FuzzCompareRecords: before NCCL sees a collective, every rank's control
// record (sequence, Signature, rejected flag, AllToAllV send counts) is
// gathered and compared (compare). Rank 1's record here is whatever the
// fuzzer makes; rank 0 calls AllReduce or AllToAllV. No panic; success
// only when rank 1's record is rank 0's own (and its counts fit); a
// rejected flag is a plain abandon, anything else that differs a
// mismatch.
func FuzzCompareRecords(f *testing.F) {
	const size = 2
	mine := func(kind comm.Kind) (*task, []byte) {
		t := &task{seq: 7, call: comm.Call{Kind: kind, Op: comm.Sum,
			Send: comm.Host(make([]float32, 4)), Recv: comm.Host(make([]float32, 4))}}
		if kind == comm.KindAllToAllV {
			t.call.SendCounts, t.call.RecvCounts = []int{1, 3}, []int{1, 3}
		}
		return t, record(t, size)
	}
	for _, kind := range []comm.Kind{comm.KindAllReduce, comm.KindAllToAllV} {
		_, r := mine(kind)
		f.Add(kind == comm.KindAllToAllV, r)
		bad := append([]byte(nil), r...)
		bad[11] = 1
		f.Add(kind == comm.KindAllToAllV, bad)
		other := append([]byte(nil), r...)
		other[16]++
		f.Add(kind == comm.KindAllToAllV, other)
	}
	f.Add(false, []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, alltoallv bool, peer []byte) {
		kind := comm.KindAllReduce
		if alltoallv {
			kind = comm.KindAllToAllV
		}
		tk, me := mine(kind)
		per := len(me)
		tk.all = make([]byte, size*per)
		copy(tk.all, me)
		copy(tk.all[per:], peer) // cut or zero-padded: the gather's lengths are fixed
		c := &Comm{rank: 0, size: size}
		err, fatal := c.compare(tk)
		seq, sig, rejected := parseRecord(tk.all[per:])
		mySeq, mySig, _ := parseRecord(me)
		switch {
		case err == nil:
			if rejected || seq != mySeq || sig != mySig {
				t.Fatalf("a record that differs passed: %d %+v %v vs %d %+v", seq, sig, rejected, mySeq, mySig)
			}
		case rejected:
			if fatal || !comm.PlainAbandon(err) {
				t.Fatalf("a rejected call: %v (fatal %v), want a plain abandon", err, fatal)
			}
		default:
			if !fatal || !errors.Is(err, comm.ErrMismatch) {
				t.Fatalf("a differing record: %v (fatal %v), want a fatal mismatch", err, fatal)
			}
		}
	})
}
