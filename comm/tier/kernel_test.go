package tier

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// TestKernel: NewKernel refuses what ReduceFunc refuses, reduces with the
// op's step, and Finish divides for Avg only.
func TestKernel(t *testing.T) {
	if _, err := NewKernel(comm.I32, comm.Avg); err == nil {
		t.Error("Avg on i32 accepted")
	}
	f32 := func(xs ...float32) []byte {
		b := make([]byte, 4*len(xs))
		for i, x := range xs {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	}
	at := func(b []byte, i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) }
	for _, c := range []struct {
		op   comm.ReduceOp
		want float32
	}{{comm.Sum, 6}, {comm.Avg, 3}, {comm.Max, 4}} {
		k, err := NewKernel(comm.F32, c.op)
		if err != nil {
			t.Fatal(err)
		}
		if k.Size != 4 || k.DType != comm.F32 || k.Op != c.op {
			t.Errorf("%v: kernel %+v", c.op, k)
		}
		dst := f32(2)
		k.Reduce(dst, f32(4))
		k.Finish(dst, 2)
		if got := at(dst, 0); got != c.want {
			t.Errorf("%v: 2 op 4, finished over 2 ranks = %v, want %v", c.op, got, c.want)
		}
	}
}
