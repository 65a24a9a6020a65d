package commtest

import (
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/hiercomm/hiercomm/comm"
)

// Options selects the cases of a suite. The zero value runs the defaults;
// every rank of a world must pass equal Options, because the case list (and
// so the order of collectives) is built from them.
type Options struct {
	// Counts are the per-rank element counts n of the cases (n is the count
	// of comm.Call's layout: AllGather sends n and receives size·n, and so
	// on). If nil, defaults to {0, 1, 7, 1000003}.
	Counts []int
	// DTypes are the element types. If nil, defaults to comm.DTypes.
	DTypes []comm.DType
	// Ops are the reduction operators of the reducing kinds. If nil,
	// defaults to comm.ReduceOps. Avg runs on floating-point dtypes only;
	// Avg on integers is an error case of RunBadInput.
	Ops []comm.ReduceOp
	// Kinds are the operations. If nil, defaults to every collective
	// (AllReduce … ExScan, Barrier) and Send/Recv (a ring exchange; either
	// of comm.KindSend and comm.KindRecv selects it). comm.KindSplit is not a
	// case here: see SplitRank.
	Kinds []comm.Kind

	// LargeCount is the count from which a case is large. If zero, defaults
	// to 4096. Large counts run only for a representative subset, unless
	// FullLarge: AllReduce on f32 with every op, bf16 and f16 with sum and
	// max, i64 with sum and min, u8 with max, f64 with avg and premulsum,
	// i16 with bxor, bool with sum, f8e5m2 with sum, plus random data; Reduce, ReduceScatter, Scan and ExScan on f32 with sum and max,
	// bf16 with sum, i64 with min, u8 with max; Broadcast, Gather, Scatter
	// and Send/Recv on one dtype of each element size (u8, bf16, f32, i64);
	// AllGather, AllToAll and AllToAllV on u8 and f32; one root (size-1);
	// in place on f32 (sum) only; no NaN variant.
	LargeCount int
	// FullLarge runs large counts for every combination, like small ones.
	FullLarge bool
	// FullMatrix runs every cell of the mismatch matrix
	// (MismatchMatrixRank): every pair of kinds with every count and every
	// rank as the odd one; otherwise each pair once, the odd rank and the
	// count going round from pair to pair.
	FullMatrix bool
	// MismatchWithin bounds how long a rank of the mismatch matrix may take
	// to report the mismatch. If zero, defaults to MatrixWithin.
	MismatchWithin time.Duration
	// SkipFaults skips cases of the fault suite (FaultsRank): the case's
	// name (one of FaultCases) → why this communicator cannot pass it,
	// which every rank logs. A fault case is never skipped otherwise.
	SkipFaults map[string]string

	// Timeout bounds each case (every collective of it, on this rank). If
	// zero, defaults to 60 s.
	Timeout time.Duration
	// Log, if set, receives one line per failed case and a summary per
	// suite, e.g. t.Logf. It may be called from several goroutines.
	Log func(format string, args ...any)
	// Memory, if set, places the buffers of the cases, for communicators
	// that want device memory. If nil, buffers are Go memory (comm.HostBytes).
	Memory Memory
}

// Memory places the buffers of the cases. The suite builds every input and
// expected result in host memory and moves them through Memory, so a GPU
// communicator runs the same suite on device buffers. Methods may be called
// from several goroutines (one per rank in process).
type Memory interface {
	// Alloc returns a buffer of n elements of dt (n may be 0).
	Alloc(dt comm.DType, n int) (comm.Buffer, error)
	// Write copies src, exactly b.ByteLen() bytes, into b, a buffer from Alloc.
	Write(b comm.Buffer, src []byte) error
	// Read copies b, a buffer from Alloc, into dst (b.ByteLen() bytes).
	Read(dst []byte, b comm.Buffer) error
	// Free releases a buffer from Alloc.
	Free(b comm.Buffer)
}

// DefaultCounts are the counts when Options.Counts is nil: empty, one
// element, a small odd count, and a large prime (not divisible by any world
// size, a chunk size or an element size).
var DefaultCounts = []int{0, 1, 7, 1000003}

// defaultKinds is every collective that RunRank covers, plus Send (which
// stands for the Send/Recv ring).
var defaultKinds = []comm.Kind{
	comm.KindAllReduce, comm.KindBroadcast, comm.KindReduce, comm.KindAllGather,
	comm.KindReduceScatter, comm.KindAllToAll, comm.KindAllToAllV, comm.KindGather,
	comm.KindScatter, comm.KindScan, comm.KindExScan, comm.KindBarrier, comm.KindSend,
}

// withDefaults returns a copy of o with every zero field filled; the
// caller's slices are copied, never modified.
func (o Options) withDefaults() Options {
	if o.Counts == nil {
		o.Counts = DefaultCounts
	}
	if o.DTypes == nil {
		o.DTypes = comm.DTypes
	}
	if o.Ops == nil {
		o.Ops = comm.ReduceOps
	}
	if o.Kinds == nil {
		o.Kinds = defaultKinds
	}
	o.Counts = slices.Clone(o.Counts)
	o.DTypes = slices.Clone(o.DTypes)
	o.Ops = slices.Clone(o.Ops)
	o.Kinds = slices.Clone(o.Kinds)
	if o.LargeCount <= 0 {
		o.LargeCount = 4096
	}
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if o.Memory == nil {
		o.Memory = hostMemory{}
	}
	return o
}

// check reports options that no case could run with.
func (o Options) check() error {
	for _, n := range o.Counts {
		if n < 0 {
			return fmt.Errorf("commtest: negative count %d in Options.Counts", n)
		}
	}
	for _, dt := range o.DTypes {
		if !dt.Valid() {
			return fmt.Errorf("commtest: invalid dtype %v in Options.DTypes", dt)
		}
	}
	for _, op := range o.Ops {
		if !op.Valid() {
			return fmt.Errorf("commtest: invalid op %v in Options.Ops", op)
		}
	}
	for _, k := range o.Kinds {
		if k == 0 || k > comm.KindRecv {
			return fmt.Errorf("commtest: %v in Options.Kinds is not an operation RunRank can run", k)
		}
	}
	return nil
}

// hostMemory is Go memory: 8-byte aligned, so aligned for every dtype.
type hostMemory struct{}

func (hostMemory) Alloc(dt comm.DType, n int) (comm.Buffer, error) {
	nb := n * dt.Size()
	words := make([]uint64, (nb+7)/8)
	var b []byte
	if nb > 0 {
		b = unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), nb)
	} else {
		b = []byte{}
	}
	return comm.HostBytes(dt, b)
}

func (hostMemory) Write(b comm.Buffer, src []byte) error {
	if len(src) != b.ByteLen() {
		return fmt.Errorf("commtest: writing %d bytes into %v", len(src), b)
	}
	copy(b.Bytes(), src)
	return nil
}

func (hostMemory) Read(dst []byte, b comm.Buffer) error {
	if len(dst) != b.ByteLen() {
		return fmt.Errorf("commtest: reading %v into %d bytes", b, len(dst))
	}
	copy(dst, b.Bytes())
	return nil
}

func (hostMemory) Free(comm.Buffer) {}
