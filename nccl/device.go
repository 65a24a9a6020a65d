package nccl

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/hiercomm/hiercomm/comm"
)

// Device is one GPU of a Library, with its primary context current on an
// OS thread of its own: CUDA contexts are per thread, so every memory and
// copy call of this package runs there (Device.do), and goroutines never
// need to lock threads themselves (each Comm has a thread of its own for
// its NCCL calls, thread.go). A Device is shared by every Comm, stager
// and staged communicator on that GPU; it lives as long as its Library.
//
// Device also gives a trainer what it needs to put data on the GPU without
// another library: Alloc, Free, Write and Read (which make it a
// commtest.Memory, so the conformance suite runs on device buffers), and
// AllocPinned and FreePinned for host memory that those copies move at
// the bus's speed.
type Device struct {
	lib     *Library
	ordinal int
	name    string
	// computeCap is 10·major + minor of the compute capability (90: Hopper).
	computeCap int
	ctx        cuContext // the primary context, retained for the Library's life
	*osThread
	// copyStream carries the synchronous copies of Write, Read and the
	// stagers; it is used from the device thread only.
	copyStream cuStream

	mu     sync.Mutex // guards pinned and held
	pinned [][]byte   // free page-locked host buffers, reused by allocHost
	// held are the live allocations of AllocPinned, by base address.
	held []hostSpan
}

// hostSpan is one allocation of host memory: its address and length.
type hostSpan struct {
	base uintptr
	n    int
}

// Device returns GPU ordinal (0-based, after CUDA_VISIBLE_DEVICES), starting
// its thread and retaining its primary context on first use.
func (l *Library) Device(ordinal int) (*Device, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := l.devices[ordinal]; d != nil {
		return d, nil
	}
	if l.devices == nil {
		l.devices = map[int]*Device{}
	}
	d := &Device{lib: l, ordinal: ordinal}
	t, err := startThread(d.setup)
	if err != nil {
		return nil, err
	}
	d.osThread = t
	l.devices[ordinal] = d
	return d, nil
}

// setup runs first on the device's thread: the driver initialized (a
// no-op after Load), the device found, its primary context retained and
// made current, the copy stream made.
func (d *Device) setup() error {
	drv := d.lib.drv
	if r := drv.Init(0); r != cudaSuccess {
		return d.lib.cuError("cuInit", r)
	}
	var n int32
	if r := drv.DeviceGetCount(&n); r != cudaSuccess {
		return d.lib.cuError("cuDeviceGetCount", r)
	}
	if d.ordinal < 0 || d.ordinal >= int(n) {
		return fmt.Errorf("nccl: device %d does not exist: this process sees %d GPU(s) (CUDA_VISIBLE_DEVICES applies)", d.ordinal, n)
	}
	var dev cuDevice
	if r := drv.DeviceGet(&dev, int32(d.ordinal)); r != cudaSuccess {
		return d.lib.cuError(fmt.Sprintf("cuDeviceGet(%d)", d.ordinal), r)
	}
	d.name, _ = drv.DeviceGetName(dev)
	var major, minor int32
	if r := drv.DeviceGetAttribute(&major, attrComputeCapabilityMajor, dev); r != cudaSuccess {
		return d.lib.cuError(fmt.Sprintf("cuDeviceGetAttribute(compute capability, device %d)", d.ordinal), r)
	}
	if r := drv.DeviceGetAttribute(&minor, attrComputeCapabilityMinor, dev); r != cudaSuccess {
		return d.lib.cuError(fmt.Sprintf("cuDeviceGetAttribute(compute capability, device %d)", d.ordinal), r)
	}
	d.computeCap = int(10*major + minor)
	if r := drv.DevicePrimaryCtxRetain(&d.ctx, dev); r != cudaSuccess {
		return d.lib.cuError(fmt.Sprintf("cuDevicePrimaryCtxRetain(device %d)", d.ordinal), r)
	}
	if r := drv.CtxSetCurrent(d.ctx); r != cudaSuccess {
		return d.lib.cuError("cuCtxSetCurrent", r)
	}
	if r := drv.StreamCreate(&d.copyStream, cuStreamNonBlocking); r != cudaSuccess {
		return d.lib.cuError("cuStreamCreate", r)
	}
	return nil
}

// newThread starts another thread with this device's context current
// (a Comm's own).
func (d *Device) newThread() (*osThread, error) {
	return startThread(func() error {
		if r := d.lib.drv.CtxSetCurrent(d.ctx); r != cudaSuccess {
			return d.lib.cuError("cuCtxSetCurrent", r)
		}
		return nil
	})
}

// Ordinal is the device's number in this process.
func (d *Device) Ordinal() int { return d.ordinal }

func (d *Device) String() string {
	return fmt.Sprintf("device %d (%s)", d.ordinal, d.name)
}

// Alloc returns n elements of dt in the device's memory (a Buffer of
// length 0 when n is 0). Free releases it.
func (d *Device) Alloc(dt comm.DType, n int) (comm.Buffer, error) {
	if !dt.Valid() || n < 0 {
		return comm.Buffer{}, fmt.Errorf("nccl: Alloc(%v, %d): want a valid dtype and n ≥ 0", dt, n)
	}
	if n == 0 {
		return comm.Device(0, 0, dt, d.ordinal), nil
	}
	var p uintptr
	err := d.do(func() error {
		if r := d.lib.drv.MemAlloc(&p, uintptr(n*dt.Size())); r != cudaSuccess {
			return d.lib.cuError(fmt.Sprintf("cuMemAlloc(%d bytes) on %v", n*dt.Size(), d), r)
		}
		return nil
	})
	if err != nil {
		return comm.Buffer{}, err
	}
	return comm.Device(p, n, dt, d.ordinal), nil
}

// Free releases a buffer from Alloc (the whole allocation: b must be what
// Alloc returned, not a slice of it).
func (d *Device) Free(b comm.Buffer) {
	if b.Ptr() == 0 {
		return
	}
	_ = d.do(func() error { d.lib.drv.MemFree(b.Ptr()); return nil })
}

// Write copies src (exactly b.ByteLen() bytes) into the device buffer b and
// returns when the data is in device memory. (It goes through page-locked
// memory: a copy from pageable memory may return before its DMA is done,
// and nothing would order it before NCCL's non-blocking streams. src in
// memory from AllocPinned is copied from where it is; other memory is
// first copied into page-locked buffers of the device's own.)
func (d *Device) Write(b comm.Buffer, src []byte) error {
	if err := d.mine(b, "Write"); err != nil {
		return err
	}
	if len(src) != b.ByteLen() {
		return fmt.Errorf("nccl: Write of %d bytes into %v (%d bytes)", len(src), b, b.ByteLen())
	}
	if len(src) == 0 {
		return nil
	}
	if d.holds(src) {
		return d.toDevice(b, pinnedBuf{p: unsafe.Pointer(&src[0]), bytes: src})
	}
	for off := 0; off < len(src); off += writeChunk {
		n := min(writeChunk, len(src)-off)
		p, err := d.allocHost(n)
		if err != nil {
			return err
		}
		copy(p.bytes, src[off:off+n])
		err = d.toDevice(b.Slice(off/b.DType().Size(), n/b.DType().Size()), p)
		d.freeHost(p)
		if err != nil {
			return err
		}
	}
	return nil
}

// writeChunk bounds the page-locked memory one Write holds (a multiple of
// every element size).
const writeChunk = 16 << 20

// Read copies the device buffer b into dst (exactly b.ByteLen() bytes) and
// returns when the copy is done. Into memory from AllocPinned the driver
// copies at the bus's speed; into other memory it stages the copy itself.
func (d *Device) Read(dst []byte, b comm.Buffer) error {
	if err := d.mine(b, "Read"); err != nil {
		return err
	}
	if len(dst) != b.ByteLen() {
		return fmt.Errorf("nccl: Read of %v (%d bytes) into %d bytes", b, b.ByteLen(), len(dst))
	}
	if len(dst) == 0 {
		return nil
	}
	return d.do(func() error {
		r := d.lib.drv.MemcpyDtoH(unsafe.Pointer(&dst[0]), b.Ptr(), uintptr(len(dst)))
		runtime.KeepAlive(dst)
		if r != cudaSuccess {
			return d.lib.cuError("cuMemcpyDtoH", r)
		}
		return nil
	})
}

// checkCall rejects a call's buffers that this device cannot serve: memory
// of another device, and host memory unless hostOK. who says what is
// asking, for the error ("the NCCL communicator").
func (d *Device) checkCall(c comm.Call, who string, hostOK bool) error {
	for _, b := range []struct {
		name string
		buf  comm.Buffer
	}{{"send", c.Send}, {"recv", c.Recv}} {
		switch {
		case b.buf.IsZero():
		case b.buf.OnHost():
			if !hostOK {
				return &comm.ArgError{Kind: c.Kind, Arg: b.name, Problem: fmt.Sprintf(
					"is host memory (%v) but %s moves device memory; allocate it with nccl.Device.Alloc (or pass a CUDA pointer with comm.Device), or use a host communicator (shm, nexar)", b.buf, who)}
			}
		case b.buf.Device() != d.ordinal && b.buf.Len() > 0:
			return &comm.ArgError{Kind: c.Kind, Arg: b.name, Problem: fmt.Sprintf(
				"is memory of device %d but %s of this rank is on %v", b.buf.Device(), who, d)}
		}
	}
	return nil
}

// mine checks that b is memory of this device.
func (d *Device) mine(b comm.Buffer, what string) error {
	if b.OnHost() || (b.Device() != d.ordinal && b.ByteLen() > 0) {
		return fmt.Errorf("nccl: %s: %v is not memory of %v", what, b, d)
	}
	return nil
}

// AllocPinned returns n bytes of page-locked ("pinned") host memory,
// zeroed: memory that Write copies to the device, and Read from it, at the
// bus's speed and without a copy of ours in between, where ordinary Go
// memory goes through a staging copy (Write's, or the driver's for Read).
// A trainer keeps there the host side of what it moves to and from the
// GPU. It is not Go's heap: the garbage collector neither moves nor frees
// it, and it must not hold Go pointers. FreePinned gives it back; until
// then it stays locked in RAM, so allocate what the copies need, not every
// host array.
func (d *Device) AllocPinned(n int) ([]byte, error) {
	if n < 0 {
		return nil, fmt.Errorf("nccl: AllocPinned(%d) on %v: want n ≥ 0", n, d)
	}
	if n == 0 {
		return nil, nil
	}
	var p unsafe.Pointer
	err := d.do(func() error {
		if r := d.lib.drv.MemHostAlloc(&p, uintptr(n), cuMemHostAllocPortable); r != cudaSuccess {
			return d.lib.cuError(fmt.Sprintf("cuMemHostAlloc(%d bytes) for AllocPinned on %v", n, d), r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	b := unsafe.Slice((*byte)(p), n)
	clear(b)
	d.mu.Lock()
	i, _ := d.heldAt(uintptr(p))
	d.held = slices.Insert(d.held, i, hostSpan{base: uintptr(p), n: n})
	d.mu.Unlock()
	return b, nil
}

// FreePinned releases memory from AllocPinned: b must start where
// AllocPinned's slice did (any length; an empty b is nothing to free). b
// and every slice of it must not be used after. Memory that is not a live
// allocation of AllocPinned on this device — Go memory, a slice from the
// middle of one, one freed already — is an error, and nothing is freed.
func (d *Device) FreePinned(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	a := uintptr(unsafe.Pointer(&b[0]))
	d.mu.Lock()
	i, found := d.heldAt(a)
	if found {
		d.held = slices.Delete(d.held, i, i+1)
	}
	d.mu.Unlock()
	if !found {
		return fmt.Errorf("nccl: FreePinned(%#x, %d bytes) on %v: not the start of a live allocation of AllocPinned on this device (Go memory, a slice from inside one, or one freed already)", a, len(b), d)
	}
	return d.do(func() error {
		if r := d.lib.drv.MemFreeHost(unsafe.Pointer(&b[0])); r != cudaSuccess {
			return d.lib.cuError("cuMemFreeHost for FreePinned", r)
		}
		return nil
	})
}

// heldAt is where an allocation of AllocPinned at address a is in d.held,
// or would go, and whether it is there; d.mu is held.
func (d *Device) heldAt(a uintptr) (int, bool) {
	return slices.BinarySearchFunc(d.held, a, func(h hostSpan, a uintptr) int { return cmp.Compare(h.base, a) })
}

// holds reports whether b lies wholly in a live allocation of AllocPinned.
func (d *Device) holds(b []byte) bool {
	a := uintptr(unsafe.Pointer(&b[0]))
	d.mu.Lock()
	defer d.mu.Unlock()
	i, found := d.heldAt(a)
	if !found {
		i-- // the last allocation starting before a
	}
	return i >= 0 && a+uintptr(len(b)) <= d.held[i].base+uintptr(d.held[i].n)
}

// pinnedBuf is page-locked host memory: the device's own (allocHost), or
// a caller's from AllocPinned.
type pinnedBuf struct {
	p     unsafe.Pointer
	bytes []byte
}

// allocHost returns at least n bytes of page-locked host memory, reusing
// memory released by freeHost. Page-locked memory is what lets a copy run
// asynchronously at full speed (pageable copies are staged by the driver).
func (d *Device) allocHost(n int) (pinnedBuf, error) {
	d.mu.Lock()
	for i, b := range d.pinned {
		if cap(b) >= n {
			d.pinned = append(d.pinned[:i], d.pinned[i+1:]...)
			d.mu.Unlock()
			b = b[:n]
			var p unsafe.Pointer
			if n > 0 {
				p = unsafe.Pointer(&b[:1][0])
			}
			return pinnedBuf{p: p, bytes: b}, nil
		}
	}
	d.mu.Unlock()
	size := max(n, 64<<10)
	var p unsafe.Pointer
	err := d.do(func() error {
		if r := d.lib.drv.MemHostAlloc(&p, uintptr(size), cuMemHostAllocPortable); r != cudaSuccess {
			return d.lib.cuError(fmt.Sprintf("cuMemHostAlloc(%d bytes)", size), r)
		}
		return nil
	})
	if err != nil {
		return pinnedBuf{}, err
	}
	b := unsafe.Slice((*byte)(p), size)
	return pinnedBuf{p: p, bytes: b[:n]}, nil
}

// freeHost returns b to the device's pool of page-locked memory.
func (d *Device) freeHost(b pinnedBuf) {
	if b.bytes == nil {
		return
	}
	d.mu.Lock()
	d.pinned = append(d.pinned, b.bytes[:0])
	d.mu.Unlock()
}

// toHost copies the device buffer src into page-locked dst through the
// copy stream and waits for it.
func (d *Device) toHost(dst pinnedBuf, src comm.Buffer) error {
	return d.toHostBlocks(dst, src, 0, src.Len(), src.Len(), 1)
}

// toHostBlocks copies elements [off, off+k) of each of the blocks blocks
// of cnt elements of src into page-locked dst, one after another, and
// waits for them (one block of all of src: toHost; a piece of a
// ReduceScatter's send: one part of every rank's block).
func (d *Device) toHostBlocks(dst pinnedBuf, src comm.Buffer, off, k, cnt, blocks int) error {
	es := src.DType().Size()
	return d.copyBlocks(blocks, k*es, "cuMemcpyDtoHAsync", "device to host copy", func(j int) cuResult {
		return d.lib.drv.MemcpyDtoHAsync(unsafe.Add(dst.p, j*k*es), src.Ptr()+uintptr((j*cnt+off)*es), uintptr(k*es), d.copyStream)
	})
}

// toDeviceBlocks is toHostBlocks the other way: page-locked src, one part
// after another, into elements [off, off+k) of each block of dst (one
// block of all of dst: toDevice; a piece of an AllGather's result).
func (d *Device) toDeviceBlocks(dst comm.Buffer, src pinnedBuf, off, k, cnt, blocks int) error {
	es := dst.DType().Size()
	return d.copyBlocks(blocks, k*es, "cuMemcpyHtoDAsync", "host to device copy", func(j int) cuResult {
		return d.lib.drv.MemcpyHtoDAsync(dst.Ptr()+uintptr((j*cnt+off)*es), unsafe.Add(src.p, j*k*es), uintptr(k*es), d.copyStream)
	})
}

// copyBlocks queues copy(j) for each of blocks copies of bytes bytes on
// the copy stream, on the device thread, and waits for them all (none for
// no bytes). call and what name the copy and the wait in errors.
func (d *Device) copyBlocks(blocks, bytes int, call, what string, copy func(j int) cuResult) error {
	if blocks == 0 || bytes == 0 {
		return nil
	}
	return d.do(func() error {
		for j := range blocks {
			if r := copy(j); r != cudaSuccess {
				// Copies already queued finish before the next use of the
				// stream; wait for them, so no copy outlives its buffers.
				d.lib.drv.StreamSynchronize(d.copyStream)
				return d.lib.cuError(call, r)
			}
		}
		if r := d.lib.drv.StreamSynchronize(d.copyStream); r != cudaSuccess {
			return d.lib.cuError("cuStreamSynchronize ("+what+")", r)
		}
		return nil
	})
}

// toHostAfter is toHost once the work queued on another stream before
// event ev is done (the copy stream waits for ev first).
func (d *Device) toHostAfter(dst pinnedBuf, src comm.Buffer, ev cuEvent) error {
	if err := d.do(func() error {
		if r := d.lib.drv.StreamWaitEvent(d.copyStream, ev, 0); r != cudaSuccess {
			return d.lib.cuError("cuStreamWaitEvent", r)
		}
		return nil
	}); err != nil {
		return err
	}
	return d.toHost(dst, src)
}

// toDevice copies page-locked src into the device buffer dst through the
// copy stream and waits for it.
func (d *Device) toDevice(dst comm.Buffer, src pinnedBuf) error {
	return d.toDeviceBlocks(dst, src, 0, dst.Len(), dst.Len(), 1)
}

// copyDevice copies src to dst, both in this device's memory, and waits.
func (d *Device) copyDevice(dst, src comm.Buffer) error {
	if dst.ByteLen() != src.ByteLen() {
		return fmt.Errorf("nccl: copy of %v into %v", src, dst)
	}
	return d.copyBlocks(1, dst.ByteLen(), "cuMemcpyDtoDAsync", "device copy", func(int) cuResult {
		return d.lib.drv.MemcpyDtoDAsync(dst.Ptr(), src.Ptr(), uintptr(dst.ByteLen()), d.copyStream)
	})
}

// hostOp runs f on page-locked host copies of the device buffers bufs:
// those marked in are read from the device first, those marked out are
// written back after f. It is how the few local steps that need
// arithmetic on device data (Avg's division on sizes that are not a power
// of two, the combine of Scan, ExScan and float Min/Max) run without
// device kernels, which a cgo-free build cannot compile.
func (d *Device) hostOp(bufs []comm.Buffer, in, out []bool, f func(host [][]byte) error) error {
	pins := make([]pinnedBuf, len(bufs))
	defer func() {
		for _, p := range pins {
			d.freeHost(p)
		}
	}()
	host := make([][]byte, len(bufs))
	for i, b := range bufs {
		p, err := d.allocHost(b.ByteLen())
		if err != nil {
			return err
		}
		pins[i], host[i] = p, p.bytes
		if in[i] {
			if err := d.toHost(p, b); err != nil {
				return err
			}
		}
	}
	if err := f(host); err != nil {
		return err
	}
	var errs []error
	for i, b := range bufs {
		if out[i] {
			errs = append(errs, d.toDevice(b, pins[i]))
		}
	}
	return errors.Join(errs...)
}
