package nccl

import (
	"sort"
	"unsafe"
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

// fakeAlloc is one MemAlloc.
type fakeAlloc struct {
	base uintptr
	mem  []byte
}

// fakePinned is one MemHostAlloc.
type fakePinned struct {
	base uintptr
	mem  []byte
}

// devRange returns the n bytes of device memory at p, or false when they
// are not all inside one live allocation. n == 0 is always in range. The
// caller holds w.mu; the bytes are read or written under w.memMu.
func (w *fakeWorld) devRange(p, n uintptr) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	i := sort.Search(len(w.allocs), func(i int) bool {
		a := w.allocs[i]
		return a.base+uintptr(len(a.mem)) > p
	})
	if i == len(w.allocs) || p < w.allocs[i].base {
		return nil, false
	}
	a := w.allocs[i]
	off := p - a.base
	if n > uintptr(len(a.mem))-off {
		return nil, false
	}
	return a.mem[off : off+n : off+n], true
}

// hostRange returns the n bytes of page-locked host memory at p, or false
// when they are not all inside one live MemHostAlloc buffer. The caller
// holds w.mu.
func (w *fakeWorld) hostRange(p unsafe.Pointer, n uintptr) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	a := uintptr(p)
	i := sort.Search(len(w.pinned), func(i int) bool {
		b := w.pinned[i]
		return b.base+uintptr(len(b.mem)) > a
	})
	if i == len(w.pinned) || a < w.pinned[i].base {
		return nil, false
	}
	b := w.pinned[i]
	off := a - b.base
	if n > uintptr(len(b.mem))-off {
		return nil, false
	}
	return b.mem[off : off+n : off+n], true
}

// MemAlloc refuses zero bytes (CUDA_ERROR_INVALID_VALUE), as cuMemAlloc
// does. The memory holds garbage until written.
func (d fakeDriver) MemAlloc(ptr *uintptr, bytes uintptr) cuResult {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.checkInit(); r != cudaSuccess {
		return r
	}
	if ptr == nil || bytes == 0 {
		return cudaErrorInvalidValue
	}
	if bytes > fakeMemLimit-w.liveBytes {
		return cudaErrorOutOfMemory
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
	return cudaSuccess
}

// MemFree takes the address MemAlloc returned, nothing else. It does not
// wait for queued work (see the fake's overview in fake.go).
func (d fakeDriver) MemFree(ptr uintptr) cuResult {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.checkInit(); r != cudaSuccess {
		return r
	}
	i := sort.Search(len(w.allocs), func(i int) bool { return w.allocs[i].base >= ptr })
	if i == len(w.allocs) || w.allocs[i].base != ptr {
		return cudaErrorInvalidValue
	}
	w.liveBytes -= uintptr(len(w.allocs[i].mem))
	w.allocs = append(w.allocs[:i], w.allocs[i+1:]...)
	return cudaSuccess
}

// MemHostAlloc returns Go memory kept alive until MemFreeHost; it stands
// for page-locked memory, the only host memory the asynchronous copies
// accept.
func (d fakeDriver) MemHostAlloc(p *unsafe.Pointer, bytes uintptr, flags uint32) cuResult {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.checkInit(); r != cudaSuccess {
		return r
	}
	if p == nil || bytes == 0 || flags&^fakeHostAllocFlags != 0 {
		return cudaErrorInvalidValue
	}
	if bytes > fakeMemLimit {
		return cudaErrorOutOfMemory
	}
	mem := make([]byte, bytes)
	b := &fakePinned{base: uintptr(unsafe.Pointer(&mem[0])), mem: mem}
	i := sort.Search(len(w.pinned), func(i int) bool { return w.pinned[i].base > b.base })
	w.pinned = append(w.pinned, nil)
	copy(w.pinned[i+1:], w.pinned[i:])
	w.pinned[i] = b
	*p = unsafe.Pointer(&mem[0])
	return cudaSuccess
}

// MemFreeHost takes the pointer MemHostAlloc returned, nothing else.
func (d fakeDriver) MemFreeHost(p unsafe.Pointer) cuResult {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.checkInit(); r != cudaSuccess {
		return r
	}
	a := uintptr(p)
	i := sort.Search(len(w.pinned), func(i int) bool { return w.pinned[i].base >= a })
	if i == len(w.pinned) || w.pinned[i].base != a {
		return cudaErrorInvalidValue
	}
	w.pinned = append(w.pinned[:i], w.pinned[i+1:]...)
	return cudaSuccess
}

// hostBytes is the caller's Go memory of a synchronous copy.
func hostBytes(p unsafe.Pointer, n uintptr) []byte {
	return unsafe.Slice((*byte)(p), n)
}

// syncCopy runs a synchronous copy: on the calling thread's stream 0 when
// it has a current context (so it comes after the work queued there, as
// cuMemcpy on the legacy stream does), else at once. The caller holds
// w.mu, which syncCopy releases while it waits.
func (w *fakeWorld) syncCopy(copyFn func() cuResult) cuResult {
	c := w.thread().ctx
	if c == nil {
		w.mu.Unlock()
		defer w.mu.Lock()
		return copyFn()
	}
	op := w.enqueue(c.legacyStream(), func(sticky cuResult) cuResult {
		if sticky != cudaSuccess {
			return sticky
		}
		return copyFn()
	})
	w.mu.Unlock()
	<-op.done
	w.mu.Lock()
	return op.res
}

// MemcpyHtoD copies from any host memory; it returns when the copy is
// done.
func (d fakeDriver) MemcpyHtoD(dst uintptr, src unsafe.Pointer, bytes uintptr) cuResult {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.checkInit(); r != cudaSuccess || bytes == 0 {
		return r
	}
	if src == nil {
		return cudaErrorInvalidValue
	}
	if _, ok := w.devRange(dst, bytes); !ok {
		return cudaErrorIllegalAddress
	}
	host := hostBytes(src, bytes)
	return w.syncCopy(func() cuResult {
		w.mu.Lock()
		dev, ok := w.devRange(dst, bytes)
		w.mu.Unlock()
		if !ok {
			return cudaErrorIllegalAddress
		}
		w.memMu.Lock()
		copy(dev, host)
		w.memMu.Unlock()
		return cudaSuccess
	})
}

// MemcpyDtoH copies to any host memory; it returns when the copy is done.
func (d fakeDriver) MemcpyDtoH(dst unsafe.Pointer, src uintptr, bytes uintptr) cuResult {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.checkInit(); r != cudaSuccess || bytes == 0 {
		return r
	}
	if dst == nil {
		return cudaErrorInvalidValue
	}
	if _, ok := w.devRange(src, bytes); !ok {
		return cudaErrorIllegalAddress
	}
	host := hostBytes(dst, bytes)
	return w.syncCopy(func() cuResult {
		w.mu.Lock()
		dev, ok := w.devRange(src, bytes)
		w.mu.Unlock()
		if !ok {
			return cudaErrorIllegalAddress
		}
		w.memMu.Lock()
		copy(host, dev)
		w.memMu.Unlock()
		return cudaSuccess
	})
}

// asyncCopy queues a copy on stream s. The ranges are checked now (an
// illegal address is returned at once) and again when the copy runs
// (memory freed meanwhile is an illegal address then, and sticks to the
// stream). host and device are looked up by the caller's closure.
func (w *fakeWorld) asyncCopy(s cuStream, check func() cuResult, run func() cuResult) cuResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.checkInit(); r != cudaSuccess {
		return r
	}
	st, r := w.stream(s)
	if r != cudaSuccess {
		return r
	}
	if r := check(); r != cudaSuccess {
		return r
	}
	w.enqueue(st, func(sticky cuResult) cuResult {
		if sticky != cudaSuccess {
			return sticky
		}
		return run()
	})
	return cudaSuccess
}

// MemcpyHtoDAsync needs page-locked src (MemHostAlloc): other host memory
// is cudaErrorInvalidValue here, where CUDA would silently run the copy
// synchronously (a deliberate difference, to catch the misuse).
func (d fakeDriver) MemcpyHtoDAsync(dst uintptr, src unsafe.Pointer, bytes uintptr, s cuStream) cuResult {
	w := d.w
	return w.asyncCopy(s, func() cuResult {
		if _, ok := w.hostRange(src, bytes); !ok {
			return cudaErrorInvalidValue
		}
		if _, ok := w.devRange(dst, bytes); !ok {
			return cudaErrorIllegalAddress
		}
		return cudaSuccess
	}, func() cuResult {
		w.mu.Lock()
		host, ok1 := w.hostRange(src, bytes)
		dev, ok2 := w.devRange(dst, bytes)
		w.mu.Unlock()
		if !ok1 || !ok2 {
			return cudaErrorIllegalAddress
		}
		w.memMu.Lock()
		copy(dev, host)
		w.memMu.Unlock()
		return cudaSuccess
	})
}

// MemcpyDtoHAsync needs page-locked dst, as MemcpyHtoDAsync needs src.
func (d fakeDriver) MemcpyDtoHAsync(dst unsafe.Pointer, src uintptr, bytes uintptr, s cuStream) cuResult {
	w := d.w
	return w.asyncCopy(s, func() cuResult {
		if _, ok := w.hostRange(dst, bytes); !ok {
			return cudaErrorInvalidValue
		}
		if _, ok := w.devRange(src, bytes); !ok {
			return cudaErrorIllegalAddress
		}
		return cudaSuccess
	}, func() cuResult {
		w.mu.Lock()
		host, ok1 := w.hostRange(dst, bytes)
		dev, ok2 := w.devRange(src, bytes)
		w.mu.Unlock()
		if !ok1 || !ok2 {
			return cudaErrorIllegalAddress
		}
		w.memMu.Lock()
		copy(host, dev)
		w.memMu.Unlock()
		return cudaSuccess
	})
}

func (d fakeDriver) MemcpyDtoDAsync(dst, src uintptr, bytes uintptr, s cuStream) cuResult {
	w := d.w
	return w.asyncCopy(s, func() cuResult {
		_, ok1 := w.devRange(dst, bytes)
		_, ok2 := w.devRange(src, bytes)
		if !ok1 || !ok2 {
			return cudaErrorIllegalAddress
		}
		return cudaSuccess
	}, func() cuResult {
		w.mu.Lock()
		to, ok1 := w.devRange(dst, bytes)
		from, ok2 := w.devRange(src, bytes)
		w.mu.Unlock()
		if !ok1 || !ok2 {
			return cudaErrorIllegalAddress
		}
		w.memMu.Lock()
		copy(to, from)
		w.memMu.Unlock()
		return cudaSuccess
	})
}

func (d fakeDriver) MemsetD8Async(dst uintptr, v uint8, n uintptr, s cuStream) cuResult {
	w := d.w
	return w.asyncCopy(s, func() cuResult {
		if _, ok := w.devRange(dst, n); !ok {
			return cudaErrorIllegalAddress
		}
		return cudaSuccess
	}, func() cuResult {
		w.mu.Lock()
		to, ok := w.devRange(dst, n)
		w.mu.Unlock()
		if !ok {
			return cudaErrorIllegalAddress
		}
		w.memMu.Lock()
		for i := range to {
			to[i] = v
		}
		w.memMu.Unlock()
		return cudaSuccess
	})
}
