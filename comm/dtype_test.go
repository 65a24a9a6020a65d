package comm_test

import (
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// Every dtype and op has a name that parses back, a size, and the Go type
// that Host takes for it.
func TestDTypesAndOpsRoundTrip(t *testing.T) {
	for _, dt := range comm.DTypes {
		got, err := comm.ParseDType(dt.String())
		if err != nil || got != dt || !dt.Valid() || dt.Size() == 0 {
			t.Errorf("%v: ParseDType = %v, %v; Valid %v, Size %d", dt, got, err, dt.Valid(), dt.Size())
		}
	}
	for _, op := range comm.ReduceOps {
		if got, err := comm.ParseReduceOp(op.String()); err != nil || got != op {
			t.Errorf("%v: ParseReduceOp = %v, %v", op, got, err)
		}
	}
	if dt := comm.DType(comm.NumDTypes); dt.Valid() || dt.Size() != 0 {
		t.Errorf("DType(NumDTypes) is valid")
	}
	if op := comm.ReduceOp(comm.NumReduceOps); op.Valid() {
		t.Errorf("ReduceOp(NumReduceOps) is valid")
	}
	for _, c := range []struct {
		buf  comm.Buffer
		want comm.DType
	}{
		{comm.Host([]int16{1}), comm.I16}, {comm.Host([]uint16{1}), comm.U16}, {comm.Host([]bool{true}), comm.Bool},
		{comm.Host([]comm.Float8E4M3{1}), comm.F8E4M3}, {comm.Host([]comm.Float8E5M2{1}), comm.F8E5M2}, {comm.Host([]uint8{1}), comm.U8},
	} {
		if c.buf.DType() != c.want || c.buf.ByteLen() != c.want.Size() {
			t.Errorf("Host of %v: dtype %v, %d bytes", c.want, c.buf.DType(), c.buf.ByteLen())
		}
	}
}

// CanReduce: bitwise ops on integers and bool only, PreMulSum and Avg on
// floats only.
func TestCanReduceNewOps(t *testing.T) {
	for _, c := range []struct {
		dt   comm.DType
		op   comm.ReduceOp
		want string // "" if defined
	}{
		{comm.I16, comm.BXor, ""}, {comm.U64, comm.BAnd, ""}, {comm.Bool, comm.BOr, ""}, {comm.Bool, comm.Sum, ""},
		{comm.F8E4M3, comm.PreMulSum, ""}, {comm.BF16, comm.PreMulSum, ""}, {comm.F8E5M2, comm.Avg, ""},
		{comm.F32, comm.BAnd, "band is defined on integer and bool dtypes only"},
		{comm.F8E4M3, comm.BXor, "bxor is defined on integer and bool dtypes only"},
		{comm.I32, comm.PreMulSum, "premulsum is defined on float dtypes only"},
		{comm.Bool, comm.PreMulSum, "premulsum is defined on float dtypes only"},
		{comm.Bool, comm.Avg, "avg is not defined on bool"},
		{comm.U16, comm.Avg, "avg is not defined on integer dtype u16"},
	} {
		err := comm.CanReduce(c.dt, c.op)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("CanReduce(%v, %v) = %v, want %q", c.dt, c.op, err, c.want)
		}
	}
}

// PreMulSum's factor is each rank's own, as in NCCL: it is not part of
// the Signature that ranks compare, but the op is.
func TestSignatureLeavesOutTheFactor(t *testing.T) {
	b := comm.Host(make([]float32, 4))
	a := comm.Call{Kind: comm.KindAllReduce, Send: b, Recv: b, Op: comm.PreMulSum, Scalar: 0.5}
	c := a
	c.Scalar = 2
	if a.Signature() != c.Signature() {
		t.Errorf("factors 0.5 and 2: %v and %v differ", a.Signature(), c.Signature())
	}
	c.Op, c.Scalar = comm.Sum, 0
	if a.Signature() == c.Signature() {
		t.Errorf("PreMulSum and Sum have the same Signature %v", a.Signature())
	}
	if got := a.Signature().String(); got != "AllReduce(4×f32, premulsum)" {
		t.Errorf("Signature = %q", got)
	}
}
