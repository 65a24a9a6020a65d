package trainer

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nccl"
)

// Device is where a trainer run with -device keeps the vectors its
// collectives move: memory of the rank's GPU (the World's nccl.Device),
// where every AllReduce, ReduceScatter and AllGather of gradients and
// parameters runs, through whatever the World is (NCCL inside a node,
// pinned host staging between nodes).
//
// hiercomm has no GPU kernels (it builds without cgo or nvcc), so the
// model's arithmetic — forward, backward, the optimizer — stays on the
// host. Each Vector therefore has two copies: the host's, which the
// arithmetic reads and writes, and the device's, which the collectives
// read and write; Put and Get move a range between them. The host copy
// is page-locked memory (nccl.Device.AllocPinned), so those copies run at
// the bus's speed without a staging copy. Every such copy is counted
// (Copies), so a run reports its host↔device traffic apart from its
// communication. A real GPU trainer computes where its vectors
// live and has none of these copies; the collectives' part is the same.
//
// A nil *Device is a run on host memory: a Vector has no device copy,
// its buffers are the host slice, and Put and Get do nothing. A Device
// may be used from several goroutines.
type Device struct {
	dev       *nccl.Device
	h2d, d2h  counter
	allocated atomic.Int64 // bytes of live Vectors' device buffers
}

// counter adds up copies of one direction.
type counter struct{ ns, bytes atomic.Int64 }

func (c *counter) add(start time.Time, bytes int) {
	c.ns.Add(int64(time.Since(start)))
	c.bytes.Add(int64(bytes))
}

// NewDevice returns the Device of dev, or nil (host memory) when dev is
// nil.
func NewDevice(dev *nccl.Device) *Device {
	if dev == nil {
		return nil
	}
	return &Device{dev: dev}
}

func (d *Device) String() string {
	if d == nil {
		return "host memory"
	}
	return d.dev.String()
}

// Copies is how much a Device has copied between host and device memory,
// each way: the time the copies took and the bytes they moved.
type Copies struct {
	H2D, D2H           time.Duration
	H2DBytes, D2HBytes int64
}

// Copies is what d has copied so far (zero for a nil Device).
func (d *Device) Copies() Copies {
	if d == nil {
		return Copies{}
	}
	return Copies{
		H2D: time.Duration(d.h2d.ns.Load()), D2H: time.Duration(d.d2h.ns.Load()),
		H2DBytes: d.h2d.bytes.Load(), D2HBytes: d.d2h.bytes.Load(),
	}
}

// Sub is what was copied since before.
func (c Copies) Sub(before Copies) Copies {
	return Copies{H2D: c.H2D - before.H2D, D2H: c.D2H - before.D2H,
		H2DBytes: c.H2DBytes - before.H2DBytes, D2HBytes: c.D2HBytes - before.D2HBytes}
}

// Per is c divided among steps steps.
func (c Copies) Per(steps int) Copies {
	n := int64(max(steps, 1))
	return Copies{H2D: c.H2D / time.Duration(n), D2H: c.D2H / time.Duration(n), H2DBytes: c.H2DBytes / n, D2HBytes: c.D2HBytes / n}
}

// String says both directions: bytes, time and rate.
func (c Copies) String() string {
	one := func(bytes int64, d time.Duration) string {
		s := fmt.Sprintf("%.2f MiB in %.2f ms", float64(bytes)/(1<<20), float64(d)/float64(time.Millisecond))
		if d > 0 {
			s += fmt.Sprintf(" (%.2f GB/s)", float64(bytes)/d.Seconds()/1e9)
		}
		return s
	}
	return "host→device " + one(c.H2DBytes, c.H2D) + ", device→host " + one(c.D2HBytes, c.D2H)
}

// Allocated is how many bytes of device memory d's live Vectors hold.
func (d *Device) Allocated() int {
	if d == nil {
		return 0
	}
	return int(d.allocated.Load())
}

// Vector is a float32 vector of the model that collectives move: Host is
// where the arithmetic reads and writes it; on a Device it also has a
// device buffer of the same length, where the collectives run (Buf).
type Vector struct {
	Host   []float32
	d      *Device
	dev    comm.Buffer // zero on host memory
	pinned []byte      // Host's memory on a Device (AllocPinned); nil on host memory
}

// Vector returns a Vector of n elements, all zero: on host memory (d nil)
// a Go slice; on a Device a page-locked host copy and a device buffer of n
// elements. The device copy starts as the host's (it is written once
// here), so a collective that reads it before any Put reads zeros, never
// uninitialized memory. Free releases it.
func (d *Device) Vector(n int) (*Vector, error) {
	if d == nil {
		return &Vector{Host: make([]float32, n)}, nil
	}
	v := &Vector{d: d, Host: []float32{}}
	if n > 0 {
		p, err := d.dev.AllocPinned(4 * n)
		if err != nil {
			return nil, err
		}
		v.pinned, v.Host = p, unsafe.Slice((*float32)(unsafe.Pointer(&p[0])), n)
	}
	b, err := d.dev.Alloc(comm.F32, n)
	if err != nil {
		v.Free()
		return nil, err
	}
	v.dev = b
	d.allocated.Add(int64(b.ByteLen()))
	if err := v.Put(0, n); err != nil {
		v.Free()
		return nil, err
	}
	return v, nil
}

// Len is the vector's length (0 for a nil Vector: one a stage does not
// keep).
func (v *Vector) Len() int {
	if v == nil {
		return 0
	}
	return len(v.Host)
}

// Buf is elements [off, off+n) as a collective takes them: the device
// buffer's on a Device, else the host slice's.
func (v *Vector) Buf(off, n int) comm.Buffer {
	if v.d == nil {
		return comm.Host(v.Host[off : off+n])
	}
	return v.dev.Slice(off, n)
}

// Put copies elements [off, off+n) from the host copy to the device copy
// (nothing on host memory) and returns when they are in device memory.
func (v *Vector) Put(off, n int) error {
	if v.d == nil || n == 0 {
		return nil
	}
	start := time.Now()
	if err := v.d.dev.Write(v.dev.Slice(off, n), bytesOf(v.Host[off:off+n])); err != nil {
		return fmt.Errorf("copying %d elements to %v: %w", n, v.d, err)
	}
	v.d.h2d.add(start, 4*n)
	return nil
}

// Get copies elements [off, off+n) from the device copy to the host copy
// (nothing on host memory).
func (v *Vector) Get(off, n int) error {
	if v.d == nil || n == 0 {
		return nil
	}
	start := time.Now()
	if err := v.d.dev.Read(bytesOf(v.Host[off:off+n]), v.dev.Slice(off, n)); err != nil {
		return fmt.Errorf("copying %d elements from %v: %w", n, v.d, err)
	}
	v.d.d2h.add(start, 4*n)
	return nil
}

// Free releases the device copy and the page-locked host copy (nothing on
// host memory or for a nil Vector). The Vector, and its Host, must not be
// used after.
func (v *Vector) Free() {
	if v == nil || v.d == nil {
		return
	}
	if !v.dev.IsZero() {
		v.d.allocated.Add(-int64(v.dev.ByteLen()))
		v.d.dev.Free(v.dev)
		v.dev = comm.Buffer{}
	}
	if v.pinned != nil {
		_ = v.d.dev.FreePinned(v.pinned) // AllocPinned's own slice: it cannot be refused
		v.pinned, v.Host = nil, nil
	}
}

// bytesOf is the memory of s as bytes (no copy).
func bytesOf(s []float32) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s))
}
