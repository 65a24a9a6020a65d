package comm

import (
	"fmt"
	"strings"
)

// DType is the element type of a Buffer.
type DType uint8

// The element types. The zero DType is invalid.
const (
	F32 DType = iota + 1
	F64
	F16
	BF16
	I8
	U8
	I32
	U32
	I64
	U64
	I16
	U16
	// Bool is Go's bool: one byte, 0 (false) or 1 (true). Its reductions are
	// logical: Sum and Max are OR, Prod and Min are AND (as torch.distributed
	// reduces bool), and BAnd, BOr and BXor are AND, OR and XOR. A byte
	// other than 0 or 1 is not a bool; what the ops make of one is undefined.
	Bool
	// F8E4M3 and F8E5M2 are the two 8-bit float formats of the OCP FP8
	// specification (Float8E4M3, Float8E5M2), NCCL's ncclFloat8e4m3 and
	// ncclFloat8e5m2 (NCCL 2.24 and later).
	F8E4M3
	F8E5M2

	lastDType = F8E5M2
)

var dtypeNames = [...]string{"invalid", "f32", "f64", "f16", "bf16", "i8", "u8", "i32", "u32", "i64", "u64",
	"i16", "u16", "bool", "f8e4m3", "f8e5m2"}
var dtypeSizes = [...]int{0, 4, 8, 2, 2, 1, 1, 4, 4, 8, 8, 2, 2, 1, 1, 1}

// DTypes lists every valid DType, in declaration order.
var DTypes = []DType{F32, F64, F16, BF16, I8, U8, I32, U32, I64, U64, I16, U16, Bool, F8E4M3, F8E5M2}

// NumDTypes is one more than the largest DType: the length of a table
// indexed by DType.
const NumDTypes = int(lastDType) + 1

// Valid reports whether d is one of the declared element types.
func (d DType) Valid() bool { return d >= F32 && d <= lastDType }

// Size is the size of one element in bytes (0 for an invalid DType).
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeSizes[d]
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool {
	return d == F32 || d == F64 || d == F16 || d == BF16 || d == F8E4M3 || d == F8E5M2
}

// IsInteger reports whether d is a signed or unsigned integer type (not
// Bool, not a float).
func (d DType) IsInteger() bool { return d.Valid() && !d.IsFloat() && d != Bool }

func (d DType) String() string {
	if !d.Valid() {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return dtypeNames[d]
}

// ParseDType is the inverse of DType.String.
func ParseDType(s string) (DType, error) {
	for _, d := range DTypes {
		if d.String() == s {
			return d, nil
		}
	}
	return 0, fmt.Errorf("unknown dtype %q (want one of %s)", s, strings.Join(dtypeNames[1:], " "))
}

// Float16 is an IEEE 754 binary16 value, stored as its bits.
type Float16 uint16

// BFloat16 is a bfloat16 value (the top half of a binary32), stored as its bits.
type BFloat16 uint16

// Element is the set of Go types a host Buffer can hold. The set is closed
// (no ~): Float16 and BFloat16 share an underlying type and must stay apart,
// as must Float8E4M3, Float8E5M2 and uint8.
type Element interface {
	float32 | float64 | Float16 | BFloat16 | int8 | uint8 | int32 | uint32 | int64 | uint64 |
		int16 | uint16 | bool | Float8E4M3 | Float8E5M2
}

// DTypeOf returns the DType of the element type T.
func DTypeOf[T Element]() DType {
	var z T
	switch any(z).(type) {
	case float32:
		return F32
	case float64:
		return F64
	case Float16:
		return F16
	case BFloat16:
		return BF16
	case int8:
		return I8
	case uint8:
		return U8
	case int32:
		return I32
	case uint32:
		return U32
	case int64:
		return I64
	case uint64:
		return U64
	case int16:
		return I16
	case uint16:
		return U16
	case bool:
		return Bool
	case Float8E4M3:
		return F8E4M3
	default: // Float8E5M2: the Element set is closed
		return F8E5M2
	}
}

// ReduceOp is a reduction operator. The zero ReduceOp is invalid.
type ReduceOp uint8

// The reduction operators.
//
// Avg is defined for floating-point types only: the sum is divided by the
// number of ranks once, at the end, so every rank gets the same bits. On
// integer types it is refused with an *ArgError (use Sum and divide, choosing
// your own rounding).
//
// Min and Max propagate NaN: if any operand is NaN the result is NaN (as
// torch.minimum/maximum, unlike C's fmin). Sum and Prod follow IEEE 754.
// Integer Sum and Prod wrap around on overflow (two's complement).
//
// BAnd, BOr and BXor are bitwise AND, OR and XOR (torch's ReduceOp.BAND,
// BOR and BXOR), defined on the integer types and Bool, refused on floats.
//
// PreMulSum is NCCL's ncclRedOpCreatePreMulSum and torch's PREMUL_SUM: each
// rank's input is multiplied by that rank's own factor, Call.Scalar, before
// the sum (Σ scalar_r × input_r). Ranks may pass different factors, as in
// NCCL; the factor is not part of the Signature. The factor is first
// rounded to the dtype (as NCCL stores it), and each product is rounded to
// the dtype once, computed as the kernels compute Prod; the sum is then
// Sum. Defined on float types only (as NCCL); a blocking form carries no
// factor, so use Start (or comm.StartAllReduce and the like with a Call).
const (
	Sum ReduceOp = iota + 1
	Prod
	Min
	Max
	Avg
	BAnd
	BOr
	BXor
	PreMulSum

	lastReduceOp = PreMulSum
)

var opNames = [...]string{"invalid", "sum", "prod", "min", "max", "avg", "band", "bor", "bxor", "premulsum"}

// ReduceOps lists every valid ReduceOp.
var ReduceOps = []ReduceOp{Sum, Prod, Min, Max, Avg, BAnd, BOr, BXor, PreMulSum}

// NumReduceOps is one more than the largest ReduceOp: the length of a
// table indexed by ReduceOp.
const NumReduceOps = int(lastReduceOp) + 1

// Valid reports whether o is a declared operator.
func (o ReduceOp) Valid() bool { return o >= Sum && o <= lastReduceOp }

// Bitwise reports whether o is BAnd, BOr or BXor.
func (o ReduceOp) Bitwise() bool { return o == BAnd || o == BOr || o == BXor }

func (o ReduceOp) String() string {
	if !o.Valid() {
		return fmt.Sprintf("op(%d)", uint8(o))
	}
	return opNames[o]
}

// ParseReduceOp is the inverse of ReduceOp.String.
func ParseReduceOp(s string) (ReduceOp, error) {
	for _, o := range ReduceOps {
		if o.String() == s {
			return o, nil
		}
	}
	return 0, fmt.Errorf("unknown reduce op %q (want one of %s)", s, strings.Join(opNames[1:], " "))
}

// CanReduce reports whether op is defined on dt, and if not, why.
func CanReduce(dt DType, op ReduceOp) error {
	switch {
	case !dt.Valid():
		return fmt.Errorf("invalid dtype %v", dt)
	case !op.Valid():
		return fmt.Errorf("invalid reduce op %v", op)
	case op == Avg && dt == Bool:
		return fmt.Errorf("avg is not defined on bool")
	case op == Avg && !dt.IsFloat():
		return fmt.Errorf("avg is not defined on integer dtype %v (use sum and divide with the rounding you want)", dt)
	case op == PreMulSum && !dt.IsFloat():
		return fmt.Errorf("premulsum is defined on float dtypes only (as NCCL's), not on %v", dt)
	case op.Bitwise() && dt.IsFloat():
		return fmt.Errorf("%v is defined on integer and bool dtypes only, not on float dtype %v", op, dt)
	}
	return nil
}
