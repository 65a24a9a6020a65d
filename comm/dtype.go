package comm

import "fmt"

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
)

var dtypeNames = [...]string{"invalid", "f32", "f64", "f16", "bf16", "i8", "u8", "i32", "u32", "i64", "u64"}
var dtypeSizes = [...]int{0, 4, 8, 2, 2, 1, 1, 4, 4, 8, 8}

// DTypes lists every valid DType, in declaration order.
var DTypes = []DType{F32, F64, F16, BF16, I8, U8, I32, U32, I64, U64}

// Valid reports whether d is one of the declared element types.
func (d DType) Valid() bool { return d >= F32 && d <= U64 }

// Size is the size of one element in bytes (0 for an invalid DType).
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeSizes[d]
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == F32 || d == F64 || d == F16 || d == BF16 }

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
	return 0, fmt.Errorf("unknown dtype %q (want one of f32 f64 f16 bf16 i8 u8 i32 u32 i64 u64)", s)
}

// Float16 is an IEEE 754 binary16 value, stored as its bits.
type Float16 uint16

// BFloat16 is a bfloat16 value (the top half of a binary32), stored as its bits.
type BFloat16 uint16

// Element is the set of Go types a host Buffer can hold. The set is closed
// (no ~): Float16 and BFloat16 share an underlying type and must stay apart.
type Element interface {
	float32 | float64 | Float16 | BFloat16 | int8 | uint8 | int32 | uint32 | int64 | uint64
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
	default: // uint64: the Element set is closed
		return U64
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
const (
	Sum ReduceOp = iota + 1
	Prod
	Min
	Max
	Avg
)

var opNames = [...]string{"invalid", "sum", "prod", "min", "max", "avg"}

// ReduceOps lists every valid ReduceOp.
var ReduceOps = []ReduceOp{Sum, Prod, Min, Max, Avg}

// Valid reports whether o is a declared operator.
func (o ReduceOp) Valid() bool { return o >= Sum && o <= Avg }

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
	return 0, fmt.Errorf("unknown reduce op %q (want one of sum prod min max avg)", s)
}

// CanReduce reports whether op is defined on dt, and if not, why.
func CanReduce(dt DType, op ReduceOp) error {
	switch {
	case !dt.Valid():
		return fmt.Errorf("invalid dtype %v", dt)
	case !op.Valid():
		return fmt.Errorf("invalid reduce op %v", op)
	case op == Avg && !dt.IsFloat():
		return fmt.Errorf("avg is not defined on integer dtype %v (use sum and divide with the rounding you want)", dt)
	}
	return nil
}
