package hierarchy

import (
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// Stager is the memory the 2D algorithms work in besides the caller's
// buffers: the shards, permuted blocks and tails of the large paths live
// in scratch buffers it allocates in the same memory as the caller's (host
// memory for shm and nexar parts, the caller's device for NCCL), and the
// local steps (permutation copies, Scan's combine, Avg's division) run
// where the data is. The algorithms touch the bytes of a buffer that may
// be device memory only through it: what they compute on the host
// (AllToAllV's counts and per-node headers) goes in with Write and comes
// out with Read.
//
// The executor runs one collective at a time and calls Reset after each;
// a Stager is used by one executor, so it needs no locking. A communicator
// Split off a hierarchy runs an executor of its own, beside its parent's,
// so it needs a Stager of its own: Config.NewStager makes it.
//
// On a GPU the Stager is nccl.Stager (scratch memory on the device,
// device-to-device copies), the intra part an nccl.Comm and the world and
// rails nccl.Staged, which move each call's device buffers through
// page-locked host memory; the large paths are pipelines of chunks so
// that those copies, the network and the reductions overlap.
type Stager interface {
	// Check returns an *comm.ArgError when c's buffers live in memory this
	// Stager cannot serve.
	Check(c comm.Call) error
	// Alloc returns n elements of like's dtype in the memory like lives
	// in, valid until Reset.
	Alloc(like comm.Buffer, n int) (comm.Buffer, error)
	// Reset releases every buffer Alloc returned since the last Reset.
	Reset()
	// Copy copies src to dst (same dtype and length, not overlapping).
	Copy(dst, src comm.Buffer) error
	// Reduce computes dst[i] = dst[i] op src[i] (same dtype and length;
	// Avg as Sum).
	Reduce(dst, src comm.Buffer, op comm.ReduceOp) error
	// FinishAvg divides every element of buf by n (tier.FinishAvg).
	FinishAvg(buf comm.Buffer, n int) error
	// PreMul sets dst to src × scalar, PreMulSum's first step (tier.PreMul;
	// same dtype and length, not overlapping).
	PreMul(dst, src comm.Buffer, scalar float64) error
	// Write copies src, exactly dst.ByteLen() bytes of host memory, into
	// dst, a buffer from Alloc (or a slice of one), and returns when the
	// copy is done: the few bytes the algorithms compute on the host
	// (AllToAllV's counts and headers) enter the collective's memory this
	// way.
	Write(dst comm.Buffer, src []byte) error
	// Read copies src, a buffer from Alloc (or a slice of one), into dst
	// (exactly src.ByteLen() bytes of host memory) and returns when the
	// copy is done.
	Read(dst []byte, src comm.Buffer) error
}

// HostStager serves host buffers from host memory. NewHostStager's reuses
// its memory from one collective to the next; the zero value allocates
// afresh every time.
type HostStager struct{ pool *hostPool }

type hostPool struct {
	buf  []byte
	used int
}

// Check implements Stager: every buffer must be host memory.
func (HostStager) Check(c comm.Call) error { return tier.RequireHost(c) }

// Alloc implements Stager.
func (s HostStager) Alloc(like comm.Buffer, n int) (comm.Buffer, error) {
	dt := like.DType()
	if s.pool == nil {
		return comm.HostBytes(dt, make([]byte, n*dt.Size()))
	}
	need := n * dt.Size()
	p := s.pool
	// Keep every allocation 64-byte aligned within the pool (cache lines;
	// the kernels run faster on aligned data).
	start := (p.used + 63) &^ 63
	if start+need > len(p.buf) {
		// Earlier buffers of this collective stay valid: they keep the old
		// backing array alive. The pool grows to the peak in one step
		// next time.
		grow := max(2*len(p.buf), start+need)
		p.buf = make([]byte, grow)
		start = 0
	}
	p.used = start + need
	return comm.HostBytes(dt, p.buf[start:start+need:start+need])
}

// Reset implements Stager.
func (s HostStager) Reset() {
	if s.pool != nil {
		s.pool.used = 0
	}
}

// Copy implements Stager.
func (HostStager) Copy(dst, src comm.Buffer) error {
	if dst.Len() != src.Len() || dst.DType() != src.DType() {
		return fmt.Errorf("hierarchy: copy of %v into %v", src, dst)
	}
	copy(dst.Bytes(), src.Bytes())
	return nil
}

// Reduce implements Stager.
func (HostStager) Reduce(dst, src comm.Buffer, op comm.ReduceOp) error {
	if dst.Len() != src.Len() || dst.DType() != src.DType() {
		return fmt.Errorf("hierarchy: reduction of %v into %v", src, dst)
	}
	f, err := tier.ReduceFunc(dst.DType(), op)
	if err != nil {
		return err
	}
	f(dst.Bytes(), src.Bytes())
	return nil
}

// FinishAvg implements Stager.
func (HostStager) FinishAvg(buf comm.Buffer, n int) error {
	tier.FinishAvg(buf.DType(), buf.Bytes(), n)
	return nil
}

// PreMul implements Stager.
func (HostStager) PreMul(dst, src comm.Buffer, scalar float64) error {
	if dst.Len() != src.Len() || dst.DType() != src.DType() {
		return fmt.Errorf("hierarchy: scaling of %v into %v", src, dst)
	}
	tier.PreMul(dst.DType(), dst.Bytes(), src.Bytes(), scalar)
	return nil
}

// Write implements Stager.
func (HostStager) Write(dst comm.Buffer, src []byte) error {
	if (!dst.OnHost() && dst.ByteLen() > 0) || len(src) != dst.ByteLen() {
		return fmt.Errorf("hierarchy: write of %d bytes into %v", len(src), dst)
	}
	copy(dst.Bytes(), src)
	return nil
}

// Read implements Stager.
func (HostStager) Read(dst []byte, src comm.Buffer) error {
	if (!src.OnHost() && src.ByteLen() > 0) || len(dst) != src.ByteLen() {
		return fmt.Errorf("hierarchy: read of %v into %d bytes", src, len(dst))
	}
	copy(dst, src.Bytes())
	return nil
}

// NewHostStager returns a HostStager with its own pool.
func NewHostStager() HostStager { return HostStager{pool: &hostPool{}} }
