package nccl

import (
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// Stager is the hierarchy's scratch memory and local steps on one GPU
// (it implements hierarchy.Stager): scratch buffers come from a device
// arena reused from one collective to the next, copies run on the
// device, and the two steps that need arithmetic (Scan's local combine,
// Avg's division) run on page-locked host copies, since a cgo-free build
// has no device kernels of its own. A Stager is used by one executor at a
// time and needs no locking.
type Stager struct {
	dev   *Device
	arena comm.Buffer   // u8 device memory
	used  int           // bytes of arena handed out since the last Reset
	old   []comm.Buffer // arenas outgrown during this collective, freed at Reset
}

// NewStager returns a Stager on dev.
func NewStager(dev *Device) *Stager { return &Stager{dev: dev} }

// Check rejects buffers that are not memory of the stager's device.
func (s *Stager) Check(c comm.Call) error {
	return s.dev.checkCall(c, "this communicator (NCCL inside nodes)", false)
}

// Alloc returns n elements of like's dtype in device memory, valid until
// Reset.
func (s *Stager) Alloc(like comm.Buffer, n int) (comm.Buffer, error) {
	dt := like.DType()
	need := n * dt.Size()
	if need == 0 {
		return comm.Device(0, 0, dt, s.dev.ordinal), nil
	}
	start := (s.used + 255) &^ 255 // NCCL and the copy engines like aligned buffers
	if start+need > s.arena.Len() {
		grow := max(2*s.arena.Len(), need, 1<<20)
		a, err := s.dev.Alloc(comm.U8, grow)
		if err != nil {
			return comm.Buffer{}, err
		}
		if !s.arena.IsZero() {
			s.old = append(s.old, s.arena) // earlier buffers of this collective stay valid
		}
		s.arena, start = a, 0
	}
	s.used = start + need
	return comm.Device(s.arena.Ptr()+uintptr(start), n, dt, s.dev.ordinal), nil
}

// Reset releases the buffers of the last collective.
func (s *Stager) Reset() {
	for _, b := range s.old {
		s.dev.Free(b)
	}
	s.old, s.used = nil, 0
}

// Copy copies src to dst on the device.
func (s *Stager) Copy(dst, src comm.Buffer) error {
	if dst.Len() != src.Len() || dst.DType() != src.DType() {
		return fmt.Errorf("nccl: copy of %v into %v", src, dst)
	}
	return s.dev.copyDevice(dst, src)
}

// Reduce computes dst[i] = dst[i] op src[i] (on host copies).
func (s *Stager) Reduce(dst, src comm.Buffer, op comm.ReduceOp) error {
	if dst.Len() != src.Len() || dst.DType() != src.DType() {
		return fmt.Errorf("nccl: reduction of %v into %v", src, dst)
	}
	f, err := tier.ReduceFunc(dst.DType(), op)
	if err != nil {
		return err
	}
	return s.dev.hostOp([]comm.Buffer{dst, src}, []bool{true, true}, []bool{true, false}, func(h [][]byte) error {
		f(h[0], h[1])
		return nil
	})
}

// FinishAvg divides every element of buf by n (on a host copy).
func (s *Stager) FinishAvg(buf comm.Buffer, n int) error {
	return s.dev.hostOp([]comm.Buffer{buf}, []bool{true}, []bool{true}, func(h [][]byte) error {
		tier.FinishAvg(buf.DType(), h[0], n)
		return nil
	})
}

// PreMul sets dst to src × scalar (tier.PreMul, on host copies).
func (s *Stager) PreMul(dst, src comm.Buffer, scalar float64) error {
	if dst.Len() != src.Len() || dst.DType() != src.DType() {
		return fmt.Errorf("nccl: scaling of %v into %v", src, dst)
	}
	return s.dev.hostOp([]comm.Buffer{dst, src}, []bool{false, true}, []bool{true, false}, func(h [][]byte) error {
		tier.PreMul(dst.DType(), h[0], h[1], scalar)
		return nil
	})
}

// Write copies host bytes into a buffer from Alloc.
func (s *Stager) Write(dst comm.Buffer, src []byte) error { return s.dev.Write(dst, src) }

// Read copies a buffer from Alloc into host bytes.
func (s *Stager) Read(dst []byte, src comm.Buffer) error { return s.dev.Read(dst, src) }

// Close frees the stager's device memory.
func (s *Stager) Close() {
	s.Reset()
	s.dev.Free(s.arena)
	s.arena = comm.Buffer{}
}
