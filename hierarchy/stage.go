package hierarchy

import (
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
)

// Stager is the memory the 2D algorithms work in besides the caller's
// buffers: the shards, permuted blocks and tails of the large paths live
// in scratch buffers it allocates in the same memory as the caller's (host
// memory for shm and nexar parts, the caller's device for NCCL), and the
// local steps (permutation copies, Avg's division) run where the data is.
//
// The executor runs one collective at a time and calls Reset after each;
// a Stager is used by one executor, so it needs no locking.
//
// The NCCL tier supplies a device Stager; its inter-node phase must then
// move shards through pinned host staging buffers in chunks (device →
// host, rail, host → device, overlapped), which is why the large paths are
// already written as pipelines of chunks.
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
	// FinishAvg divides every element of buf by n (comm.FinishAvg).
	FinishAvg(buf comm.Buffer, n int) error
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
func (HostStager) Check(c comm.Call) error { return comm.RequireHost(c) }

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
	f, err := comm.ReduceFunc(dst.DType(), op)
	if err != nil {
		return err
	}
	f(dst.Bytes(), src.Bytes())
	return nil
}

// FinishAvg implements Stager.
func (HostStager) FinishAvg(buf comm.Buffer, n int) error {
	comm.FinishAvg(buf.DType(), buf.Bytes(), n)
	return nil
}

// NewHostStager returns a HostStager with its own pool.
func NewHostStager() HostStager { return HostStager{pool: &hostPool{}} }
