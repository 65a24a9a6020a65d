package nccl

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/hiercomm/hiercomm/comm"
)

// How comm's dtypes and ops map onto NCCL's, and what launch does where
// NCCL has no equivalent.
//
// Data that is only moved (Broadcast, AllGather, AllToAll, Gather,
// Scatter, Send, Recv) travels as NCCL's type for the dtype, or, where
// NCCL has none (i16, u16, bool; the fp8 types before NCCL 2.24), as an
// NCCL type of the same size: NCCL copies such data bit for bit, whatever
// the type. A reduction runs as NCCL's own op where NCCL has the type and
// the op with comm's semantics; otherwise every rank's part is gathered on
// the GPU and combined on the host with comm's kernels (tier.ReduceFunc),
// in rank order:
//
//   - the float Min and Max (NCCL's drop NaNs);
//   - i16 and u16, which NCCL has no type for (every op);
//   - the bitwise ops BAnd, BOr and BXor on integers (NCCL has none);
//   - Bool's BXor (Bool is carried as ncclUint8, its other ops are
//     ncclMax, for Sum, Max and BOr, and ncclMin, for Prod, Min and BAnd,
//     exact on bytes that are 0 or 1);
//   - the fp8 types before NCCL 2.24, or on a communicator with a GPU
//     older than sm90 (NCCL refuses to reduce them there);
//   - PreMulSum on a communicator of one rank before NCCL 2.29.7;
//   - Scan and ExScan, for every dtype (NCCL has no scan).
//
// PreMulSum runs as an op of ncclRedOpCreatePreMulSum, made with this
// rank's scalar for each call and destroyed once the call is queued; where
// it is combined on the host, the ranks' scalars are gathered with the
// data.

// fp8ComputeCap is the smallest compute capability (10·major + minor) on
// which NCCL reduces the fp8 types (enqueue.cc checks comm->minCompCap).
const fp8ComputeCap = 90

func isFP8(dt comm.DType) bool { return dt == comm.F8E4M3 || dt == comm.F8E5M2 }

// oneRankFixedCode is the first NCCL whose one-rank PreMulSum kernel writes
// every element (v2.29.7-1, NVIDIA/nccl issue 1950).
const oneRankFixedCode = 22907

// ncclTypes maps comm's dtypes to NCCL's (nccl.h ncclDataType_t) where NCCL
// has them; the fp8 types from NCCL 2.24 on (Comm.nativeType).
var ncclTypes = map[comm.DType]ncclDataType{
	comm.I8: ncclInt8, comm.U8: ncclUint8, comm.I32: ncclInt32, comm.U32: ncclUint32,
	comm.I64: ncclInt64, comm.U64: ncclUint64, comm.F16: ncclFloat16, comm.F32: ncclFloat32,
	comm.F64: ncclFloat64, comm.BF16: ncclBfloat16, comm.Bool: ncclUint8,
	comm.F8E4M3: ncclFloat8e4m3, comm.F8E5M2: ncclFloat8e5m2,
}

// carriers are the NCCL types that move the bits of a dtype NCCL lacks.
var carriers = map[int]ncclDataType{1: ncclUint8, 2: ncclFloat16}

// ncclOps maps comm's reduce ops to NCCL's (nccl.h ncclRedOp_t).
var ncclOps = map[comm.ReduceOp]ncclRedOp{
	comm.Sum: ncclSum, comm.Prod: ncclProd, comm.Max: ncclMax, comm.Min: ncclMin, comm.Avg: ncclAvg,
}

// boolOps are Bool's ops on its bytes, 0 or 1, as ncclUint8.
var boolOps = map[comm.ReduceOp]ncclRedOp{
	comm.Sum: ncclMax, comm.Max: ncclMax, comm.BOr: ncclMax,
	comm.Prod: ncclMin, comm.Min: ncclMin, comm.BAnd: ncclMin,
}

// nativeType is NCCL's type for dt, and whether this NCCL has one; when it
// has not, the type is a carrier of dt's size.
func (c *Comm) nativeType(dt comm.DType) (ncclDataType, bool) {
	nt, ok := ncclTypes[dt]
	if ok && isFP8(dt) && c.lib.ncclVersion < fp8VersionCode {
		ok = false
	}
	if !ok {
		return carriers[dt.Size()], false
	}
	return nt, true
}

// nativeOp is NCCL's op for op on dt, and whether NCCL computes it as comm
// defines it (see above); PreMulSum's op is made per call (preMulOp).
func (c *Comm) nativeOp(dt comm.DType, op comm.ReduceOp) (ncclRedOp, bool) {
	if _, ok := c.nativeType(dt); !ok {
		return 0, false
	}
	switch {
	case isFP8(dt) && c.minComputeCap < fp8ComputeCap:
		// NCCL refuses fp8 reductions unless every rank's GPU is sm90 or
		// later ("FP8 reduction support begins with sm90 capable devices").
		return 0, false
	case dt == comm.Bool:
		o, ok := boolOps[op]
		return o, ok
	case op == comm.PreMulSum:
		// On one rank NCCL runs PreMulSum in its oneRankReduce kernel,
		// which before 2.29.7 can leave the last elements unwritten (see
		// launch's Avg; ncclfake.OneRankAvgCovers).
		return 0, c.size > 1 || c.lib.ncclVersion >= oneRankFixedCode
	case dt.IsFloat() && (op == comm.Min || op == comm.Max):
		return 0, false
	}
	o, ok := ncclOps[op]
	return o, ok
}

// whyOnHost says why op on dt is combined on the host (nativeOp is false).
func (c *Comm) whyOnHost(dt comm.DType, op comm.ReduceOp) string {
	switch _, typed := c.nativeType(dt); {
	case !typed && isFP8(dt):
		return fmt.Sprintf("NCCL %s has no %v; %s has", ncclVersionString(c.lib.ncclVersion), dt, ncclVersionString(fp8VersionCode))
	case !typed:
		return fmt.Sprintf("NCCL has no %v type", dt)
	case isFP8(dt) && c.minComputeCap < fp8ComputeCap:
		return fmt.Sprintf("NCCL reduces %v on sm90 and later only; the oldest GPU here is sm%d", dt, c.minComputeCap)
	case op == comm.PreMulSum:
		return fmt.Sprintf("NCCL %s's PreMulSum on one rank can leave elements unwritten", ncclVersionString(c.lib.ncclVersion))
	case dt.IsFloat():
		return "NCCL's float min and max drop NaNs"
	case dt == comm.Bool:
		return "NCCL has no xor"
	}
	return "NCCL has no bitwise ops"
}

// scalarBytes is s rounded to dt (a float dtype), as NCCL reads a PreMulSum
// scalar of that type: little-endian, dt.Size() bytes.
func scalarBytes(dt comm.DType, s float64) []byte {
	var b [8]byte
	le := binary.LittleEndian
	switch dt {
	case comm.F32:
		le.PutUint32(b[:], math.Float32bits(float32(s)))
	case comm.F64:
		le.PutUint64(b[:], math.Float64bits(s))
	case comm.F16:
		le.PutUint16(b[:], uint16(comm.Float16FromFloat64(s)))
	case comm.BF16:
		le.PutUint16(b[:], uint16(comm.BFloat16FromFloat64(s)))
	case comm.F8E4M3:
		b[0] = byte(comm.Float8E4M3FromFloat64(s))
	case comm.F8E5M2:
		b[0] = byte(comm.Float8E5M2FromFloat64(s))
	}
	return b[:dt.Size()]
}
