package comm

import (
	"fmt"
	"unsafe"
)

// Buffer is a typed view of memory that a collective reads or writes: a Go
// slice on the host, or a pointer into a device's memory. The element count
// comes from the buffer itself, so it cannot disagree with a second argument.
//
// A Buffer does not own its memory: the caller keeps it alive and does not
// touch it while a collective that uses it is in flight. The zero Buffer is
// empty (no dtype, no elements) and stands for "no buffer", for example the
// receive buffer of a non-root rank in Gather.
type Buffer struct {
	dtype  DType
	n      int
	host   []byte  // host memory; nil for device buffers
	ptr    uintptr // device pointer; 0 for host buffers
	device int     // device ordinal; -1 for host buffers
}

// Host returns a Buffer over the elements of s. The Buffer aliases s.
func Host[T Element](s []T) Buffer {
	dt := DTypeOf[T]()
	var b []byte
	if len(s) > 0 {
		b = unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*dt.Size())
	} else {
		b = []byte{}
	}
	return Buffer{dtype: dt, n: len(s), host: b, device: -1}
}

// HostBytes returns a Buffer of dtype dt over b, which must hold a whole
// number of elements. Keep b aligned for dt where you can (make([]byte, n)
// of 8 bytes or more is 8-aligned; a sub-slice at an odd offset is not):
// the kernels accept any alignment on amd64 and arm64, but run slower.
func HostBytes(dt DType, b []byte) (Buffer, error) {
	if !dt.Valid() {
		return Buffer{}, fmt.Errorf("comm.HostBytes: invalid dtype %v", dt)
	}
	if len(b)%dt.Size() != 0 {
		return Buffer{}, fmt.Errorf("comm.HostBytes: %d bytes is not a whole number of %v elements (%d bytes each)", len(b), dt, dt.Size())
	}
	if b == nil {
		b = []byte{}
	}
	return Buffer{dtype: dt, n: len(b) / dt.Size(), host: b, device: -1}, nil
}

// Device returns a Buffer of n elements of dt at device pointer ptr on the
// given device ordinal. Only device-capable communicators (nccl, and
// hierarchy over nccl) accept it; the others return an *ArgError.
func Device(ptr uintptr, n int, dt DType, device int) Buffer {
	return Buffer{dtype: dt, n: n, ptr: ptr, device: device}
}

// DType is the element type.
func (b Buffer) DType() DType { return b.dtype }

// Len is the number of elements.
func (b Buffer) Len() int { return b.n }

// ByteLen is the size in bytes.
func (b Buffer) ByteLen() int { return b.n * b.dtype.Size() }

// IsZero reports whether b is the zero Buffer ("no buffer").
func (b Buffer) IsZero() bool { return b.dtype == 0 && b.n == 0 && b.host == nil && b.ptr == 0 }

// OnHost reports whether b is host memory.
func (b Buffer) OnHost() bool { return b.host != nil }

// Device is the device ordinal, or -1 for host memory.
func (b Buffer) Device() int {
	if b.host != nil || b.IsZero() {
		return -1
	}
	return b.device
}

// Ptr is the device pointer of a device Buffer (0 for host memory).
func (b Buffer) Ptr() uintptr { return b.ptr }

// Bytes is the host memory of b; nil for a device Buffer.
func (b Buffer) Bytes() []byte { return b.host }

// Slice returns elements [off, off+n) of b. It panics when out of range, like
// slicing does.
func (b Buffer) Slice(off, n int) Buffer {
	if off < 0 || n < 0 || off+n > b.n {
		panic(fmt.Sprintf("comm.Buffer.Slice(%d, %d) out of range for %d elements", off, n, b.n))
	}
	es := b.dtype.Size()
	out := b
	out.n = n
	if b.host != nil {
		out.host = b.host[off*es : (off+n)*es : (off+n)*es]
	} else {
		out.ptr = b.ptr + uintptr(off*es)
	}
	return out
}

// SameMemory reports whether a and b are exactly the same memory (an in-place call).
func SameMemory(a, b Buffer) bool {
	if a.n != b.n || a.dtype != b.dtype {
		return false
	}
	if a.host != nil && b.host != nil {
		return len(a.host) == 0 || &a.host[0] == &b.host[0]
	}
	return a.host == nil && b.host == nil && a.ptr == b.ptr && a.device == b.device
}

// Overlap reports whether a and b share any byte without being the same memory.
func Overlap(a, b Buffer) bool {
	if SameMemory(a, b) || a.ByteLen() == 0 || b.ByteLen() == 0 {
		return false
	}
	var a0, b0 uintptr
	switch {
	case a.host != nil && b.host != nil:
		a0, b0 = uintptr(unsafe.Pointer(&a.host[0])), uintptr(unsafe.Pointer(&b.host[0]))
	case a.host == nil && b.host == nil && a.device == b.device:
		a0, b0 = a.ptr, b.ptr
	default:
		return false
	}
	return a0 < b0+uintptr(b.ByteLen()) && b0 < a0+uintptr(a.ByteLen())
}

func (b Buffer) String() string {
	if b.IsZero() {
		return "none"
	}
	where := "host"
	if b.host == nil {
		where = fmt.Sprintf("device %d", b.device)
	}
	return fmt.Sprintf("%d×%v on %s", b.n, b.dtype, where)
}
