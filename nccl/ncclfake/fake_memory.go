package ncclfake

import (
	"sort"
	"unsafe"

	"github.com/hiercomm/hiercomm/nccl/internal/cuapi"
)

// The fake's memory: device allocations, page-locked host memory, and the
// copies between them.
//
// Device memory is a synthetic address space: an allocation is a Go
// []byte kept in w.allocs under an address no Go object has (from
// fakeAddrBase up, never reused, a guard gap after each), so a device
// pointer is only ever looked up, never dereferenced, and go vet's
// unsafeptr check has nothing to say. Page-locked host memory
// (MemHostAlloc) is a Go []byte too, kept alive in w.pinned until
// MemFreeHost, whose address the caller may dereference.

const (
	// fakeAddrBase is where device addresses start: far from where Go's
	// heap lives on 64-bit systems, so a host pointer passed as a device
	// pointer is not found.
	fakeAddrBase uintptr = 0x7000_0000_0000
	// fakeAlign and fakeGuard: allocations start 2 MiB-aligned with at
	// least 2 MiB unmapped after each, so an access past the end of one
	// never lands in the next.
	fakeAlign uintptr = 2 << 20
	fakeGuard uintptr = 2 << 20
	// fakeMemLimit bounds the live device memory of a world (all devices
	// together); beyond it MemAlloc fails with CUDA_ERROR_OUT_OF_MEMORY
	// rather than exhaust the test machine.
	fakeMemLimit uintptr = 8 << 30
	// fakeGarbage fills fresh device memory (NaN in every float type).
	fakeGarbage = 0xff
	// fakeHostAllocFlags are the CU_MEMHOSTALLOC_* bits (PORTABLE,
	// DEVICEMAP, WRITECOMBINED).
	fakeHostAllocFlags = 0x7
)

// fakeAlloc is one MemAlloc (in w.allocs) or MemHostAlloc (in w.pinned).
type fakeAlloc struct {
	base uintptr
	mem  []byte
}

// rangeIn returns the n bytes at p, or false when they are not all inside
// one of allocs (sorted by address). n == 0 is always in range.
func rangeIn(allocs []*fakeAlloc, p, n uintptr) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	i := sort.Search(len(allocs), func(i int) bool {
		a := allocs[i]
		return a.base+uintptr(len(a.mem)) > p
	})
	if i == len(allocs) || p < allocs[i].base {
		return nil, false
	}
	a := allocs[i]
	off := p - a.base
	if n > uintptr(len(a.mem))-off {
		return nil, false
	}
	return a.mem[off : off+n : off+n], true
}

// devRange returns the n bytes of device memory at p, or false when they
// are not all inside one live allocation. n == 0 is always in range. The
// caller holds w.mu; the bytes are read or written under w.memMu.
func (w *fakeWorld) devRange(p, n uintptr) ([]byte, bool) {
	return rangeIn(w.allocs, p, n)
}

// hostRange returns the n bytes of page-locked host memory at p, or false
// when they are not all inside one live MemHostAlloc buffer. The caller
// holds w.mu.
func (w *fakeWorld) hostRange(p unsafe.Pointer, n uintptr) ([]byte, bool) {
	return rangeIn(w.pinned, uintptr(p), n)
}

// MemAlloc refuses zero bytes (CUDA_ERROR_INVALID_VALUE), as cuMemAlloc
// does. The memory holds garbage until written.
func (d fakeDriver) MemAlloc(ptr *uintptr, bytes uintptr) cuapi.CUResult {
	w := d.w
	return w.locked(func() cuapi.CUResult {
		if ptr == nil || bytes == 0 {
			return cuapi.CUDAErrorInvalidValue
		}
		if bytes > fakeMemLimit-w.liveBytes {
			return cuapi.CUDAErrorOutOfMemory
		}
		mem := make([]byte, bytes)
		for i := range mem {
			mem[i] = fakeGarbage
		}
		a := &fakeAlloc{base: w.nextAddr, mem: mem}
		w.nextAddr += (bytes+fakeAlign-1)&^(fakeAlign-1) + fakeGuard
		w.allocs = append(w.allocs, a) // addresses only grow: stays sorted
		w.liveBytes += bytes
		*ptr = a.base
		return cuapi.CUDASuccess
	})
}

// MemFree takes the address MemAlloc returned, nothing else. It does not
// wait for queued work (see the fake's overview in fake.go).
func (d fakeDriver) MemFree(ptr uintptr) cuapi.CUResult {
	w := d.w
	return w.locked(func() cuapi.CUResult {
		i := sort.Search(len(w.allocs), func(i int) bool { return w.allocs[i].base >= ptr })
		if i == len(w.allocs) || w.allocs[i].base != ptr {
			return cuapi.CUDAErrorInvalidValue
		}
		w.liveBytes -= uintptr(len(w.allocs[i].mem))
		w.allocs = append(w.allocs[:i], w.allocs[i+1:]...)
		return cuapi.CUDASuccess
	})
}

// MemHostAlloc returns Go memory kept alive until MemFreeHost; it stands
// for page-locked memory, the only host memory the asynchronous copies
// accept.
func (d fakeDriver) MemHostAlloc(p *unsafe.Pointer, bytes uintptr, flags uint32) cuapi.CUResult {
	w := d.w
	return w.locked(func() cuapi.CUResult {
		if p == nil || bytes == 0 || flags&^fakeHostAllocFlags != 0 {
			return cuapi.CUDAErrorInvalidValue
		}
		if bytes > fakeMemLimit {
			return cuapi.CUDAErrorOutOfMemory
		}
		mem := make([]byte, bytes)
		b := &fakeAlloc{base: uintptr(unsafe.Pointer(&mem[0])), mem: mem}
		i := sort.Search(len(w.pinned), func(i int) bool { return w.pinned[i].base > b.base })
		w.pinned = append(w.pinned, nil)
		copy(w.pinned[i+1:], w.pinned[i:])
		w.pinned[i] = b
		*p = unsafe.Pointer(&mem[0])
		return cuapi.CUDASuccess
	})
}

// MemFreeHost takes the pointer MemHostAlloc returned, nothing else.
func (d fakeDriver) MemFreeHost(p unsafe.Pointer) cuapi.CUResult {
	w := d.w
	return w.locked(func() cuapi.CUResult {
		a := uintptr(p)
		i := sort.Search(len(w.pinned), func(i int) bool { return w.pinned[i].base >= a })
		if i == len(w.pinned) || w.pinned[i].base != a {
			return cuapi.CUDAErrorInvalidValue
		}
		w.pinned = append(w.pinned[:i], w.pinned[i+1:]...)
		return cuapi.CUDASuccess
	})
}

// hostBytes is the caller's Go memory of a synchronous copy.
func hostBytes(p unsafe.Pointer, n uintptr) []byte {
	return unsafe.Slice((*byte)(p), n)
}

// fakeLook looks up the ranges an access to memory touches, the one
// written (to) and the one read (from, nil for a memset), or returns the
// error of the first range that is not live. The caller holds w.mu.
type fakeLook func() (to, from []byte, r cuapi.CUResult)

// access is a copy or memset when it runs: it looks the ranges up again
// (memory freed since the call is an illegal address) and runs do on them
// under w.memMu. The caller does not hold w.mu.
func (w *fakeWorld) access(look fakeLook, do func(to, from []byte)) cuapi.CUResult {
	w.mu.Lock()
	to, from, r := look()
	w.mu.Unlock()
	if r != cuapi.CUDASuccess {
		return cuapi.CUDAErrorIllegalAddress
	}
	w.memMu.Lock()
	do(to, from)
	w.memMu.Unlock()
	return cuapi.CUDASuccess
}

// copyInto is the do of a copy.
func copyInto(to, from []byte) { copy(to, from) }

// ends orders the device and host ranges of a copy as to, from: toDev
// for host to device, else device to host.
func ends(dev, host []byte, toDev bool) (to, from []byte) {
	if toDev {
		return dev, host
	}
	return host, dev
}

// syncCopy runs a synchronous copy: on the calling thread's stream 0 when
// it has a current context (so it comes after the work queued there, as
// cuMemcpy on the legacy stream does), else at once. The caller holds
// w.mu, which syncCopy releases while it waits.
func (w *fakeWorld) syncCopy(copyFn func() cuapi.CUResult) cuapi.CUResult {
	c := w.thread().ctx
	if c == nil {
		w.mu.Unlock()
		defer w.mu.Lock()
		return copyFn()
	}
	op := w.enqueue(c.legacyStream(), func(sticky cuapi.CUResult) cuapi.CUResult {
		if sticky != cuapi.CUDASuccess {
			return sticky
		}
		return copyFn()
	})
	w.mu.Unlock()
	<-op.done
	w.mu.Lock()
	return op.res
}

// hostCopy is MemcpyHtoD (toDev) and MemcpyDtoH: a synchronous copy of
// bytes between device memory at dev and any host memory at host.
func (w *fakeWorld) hostCopy(dev uintptr, host unsafe.Pointer, bytes uintptr, toDev bool) cuapi.CUResult {
	return w.locked(func() cuapi.CUResult {
		if bytes == 0 {
			return cuapi.CUDASuccess
		}
		if host == nil {
			return cuapi.CUDAErrorInvalidValue
		}
		h := hostBytes(host, bytes)
		look := func() (to, from []byte, r cuapi.CUResult) {
			d, ok := w.devRange(dev, bytes)
			if !ok {
				return nil, nil, cuapi.CUDAErrorIllegalAddress
			}
			to, from = ends(d, h, toDev)
			return to, from, cuapi.CUDASuccess
		}
		if _, _, r := look(); r != cuapi.CUDASuccess {
			return r
		}
		return w.syncCopy(func() cuapi.CUResult { return w.access(look, copyInto) })
	})
}

// MemcpyHtoD copies from any host memory; it returns when the copy is
// done.
func (d fakeDriver) MemcpyHtoD(dst uintptr, src unsafe.Pointer, bytes uintptr) cuapi.CUResult {
	return d.w.hostCopy(dst, src, bytes, true)
}

// MemcpyDtoH copies to any host memory; it returns when the copy is done.
func (d fakeDriver) MemcpyDtoH(dst unsafe.Pointer, src uintptr, bytes uintptr) cuapi.CUResult {
	return d.w.hostCopy(src, dst, bytes, false)
}

// asyncCopy queues a copy or memset on stream s. The ranges are looked up
// now (an error is returned at once) and again when it runs (memory freed
// meanwhile is an illegal address then, and sticks to the stream).
func (w *fakeWorld) asyncCopy(s cuapi.Stream, look fakeLook, do func(to, from []byte)) cuapi.CUResult {
	return w.locked(func() cuapi.CUResult {
		st, r := w.stream(s)
		if r != cuapi.CUDASuccess {
			return r
		}
		if _, _, r := look(); r != cuapi.CUDASuccess {
			return r
		}
		w.enqueue(st, func(sticky cuapi.CUResult) cuapi.CUResult {
			if sticky != cuapi.CUDASuccess {
				return sticky
			}
			return w.access(look, do)
		})
		return cuapi.CUDASuccess
	})
}

// asyncHostCopy is MemcpyHtoDAsync (toDev) and MemcpyDtoHAsync: host must
// be page-locked (MemHostAlloc); other host memory is
// cuapi.CUDAErrorInvalidValue here, where CUDA would silently run the copy
// synchronously (a deliberate difference, to catch the misuse).
func (w *fakeWorld) asyncHostCopy(dev uintptr, host unsafe.Pointer, bytes uintptr, toDev bool, s cuapi.Stream) cuapi.CUResult {
	return w.asyncCopy(s, func() (to, from []byte, r cuapi.CUResult) {
		h, ok := w.hostRange(host, bytes)
		if !ok {
			return nil, nil, cuapi.CUDAErrorInvalidValue
		}
		d, ok := w.devRange(dev, bytes)
		if !ok {
			return nil, nil, cuapi.CUDAErrorIllegalAddress
		}
		to, from = ends(d, h, toDev)
		return to, from, cuapi.CUDASuccess
	}, copyInto)
}

// MemcpyHtoDAsync needs page-locked src (see asyncHostCopy).
func (d fakeDriver) MemcpyHtoDAsync(dst uintptr, src unsafe.Pointer, bytes uintptr, s cuapi.Stream) cuapi.CUResult {
	return d.w.asyncHostCopy(dst, src, bytes, true, s)
}

// MemcpyDtoHAsync needs page-locked dst, as MemcpyHtoDAsync needs src.
func (d fakeDriver) MemcpyDtoHAsync(dst unsafe.Pointer, src uintptr, bytes uintptr, s cuapi.Stream) cuapi.CUResult {
	return d.w.asyncHostCopy(src, dst, bytes, false, s)
}

func (d fakeDriver) MemcpyDtoDAsync(dst, src uintptr, bytes uintptr, s cuapi.Stream) cuapi.CUResult {
	w := d.w
	return w.asyncCopy(s, func() (to, from []byte, r cuapi.CUResult) {
		to, ok1 := w.devRange(dst, bytes)
		from, ok2 := w.devRange(src, bytes)
		if !ok1 || !ok2 {
			return nil, nil, cuapi.CUDAErrorIllegalAddress
		}
		return to, from, cuapi.CUDASuccess
	}, copyInto)
}

func (d fakeDriver) MemsetD8Async(dst uintptr, v uint8, n uintptr, s cuapi.Stream) cuapi.CUResult {
	w := d.w
	return w.asyncCopy(s, func() (to, from []byte, r cuapi.CUResult) {
		to, ok := w.devRange(dst, n)
		if !ok {
			return nil, nil, cuapi.CUDAErrorIllegalAddress
		}
		return to, nil, cuapi.CUDASuccess
	}, func(to, _ []byte) {
		for i := range to {
			to[i] = v
		}
	})
}
