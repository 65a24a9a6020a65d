package nccl

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The real function table: driverAPI and ncclAPI bound to libcuda.so.1 and
// libnccl.so.2 with purego, so the package needs no cgo and builds on
// machines without CUDA. Every Go signature below is the C one from cuda.h
// (CUDA 12.x) and nccl.h (NVIDIA/nccl src/nccl.h.in, 2.23 and later),
// argument for argument: CUresult, ncclResult_t and the enums are 32-bit
// ints; CUdeviceptr (unsigned long long) and size_t are uintptr on the
// 64-bit hosts CUDA supports; handles (CUcontext, CUstream, CUevent,
// ncclComm_t) are pointers, kept as uintptr; `const char*` results become
// Go strings (copied). The _v2 names are the ones cuda.h maps the plain
// names to (cuMemAlloc → cuMemAlloc_v2, ...): the plain names in the
// library are older entry points kept for old binaries (32-bit device
// pointers for the memory calls, older semantics for the destroy and
// release calls).

// cSymbol is one C entry point to bind: its exported name in the library
// and the Go function variable purego fills in.
type cSymbol struct {
	name string
	fn   any // pointer to a func variable
}

// bindSymbols resolves every symbol in the library behind handle and binds
// it. A symbol the library lacks is never a panic: the error names each
// missing symbol, with the dynamic loader's text for the first. file names
// the library in that error.
func bindSymbols(handle uintptr, file string, syms []cSymbol) error {
	var missing []string
	var first error
	for _, s := range syms {
		addr, err := dlsym(handle, s.name)
		if err != nil {
			missing = append(missing, s.name)
			if first == nil {
				first = err
			}
			continue
		}
		purego.RegisterFunc(s.fn, addr)
	}
	switch {
	case len(missing) == 0:
		return nil
	case len(missing) == len(syms) && len(syms) > 1:
		return fmt.Errorf("%s has none of the %d entry points needed (%v)", file, len(syms), first)
	case len(missing) > 4:
		return fmt.Errorf("%s lacks %s and %d more (%v)", file, strings.Join(missing[:4], ", "), len(missing)-4, first)
	}
	return fmt.Errorf("%s lacks %s (%v)", file, strings.Join(missing, ", "), first)
}

// dlopen and dlsym lock the OS thread around the call so that dlerror,
// which is per thread, reports this call's failure and not another's.
func dlopen(path string) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

func dlsym(handle uintptr, name string) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return purego.Dlsym(handle, name)
}

// dlclose gives back a library that was passed over. Rejected NCCLs must
// go: loaded RTLD_GLOBAL, their symbols could otherwise interpose on
// those of the NCCL finally chosen.
func dlclose(handle uintptr) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = purego.Dlclose(handle)
}

// goString copies the NUL-terminated C string at p ("" for NULL).
func goString(p unsafe.Pointer) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(p, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(p), n))
}

// realDriver is driverAPI over libcuda.so.1. Its methods are safe for
// concurrent use (the driver's own rules about the current context apply).
type realDriver struct {
	cuInit                    func(flags uint32) cuResult
	cuDriverGetVersion        func(v *int32) cuResult
	cuDeviceGetCount          func(n *int32) cuResult
	cuDeviceGet               func(d *cuDevice, ordinal int32) cuResult
	cuDeviceGetName           func(name *byte, length int32, d cuDevice) cuResult
	cuDeviceGetAttribute      func(v *int32, attr int32, d cuDevice) cuResult
	cuDevicePrimaryCtxRetain  func(ctx *cuContext, d cuDevice) cuResult
	cuDevicePrimaryCtxRelease func(d cuDevice) cuResult
	cuCtxSetCurrent           func(ctx cuContext) cuResult
	cuMemAlloc                func(ptr *uintptr, bytes uintptr) cuResult
	cuMemFree                 func(ptr uintptr) cuResult
	cuMemHostAlloc            func(p *unsafe.Pointer, bytes uintptr, flags uint32) cuResult
	cuMemFreeHost             func(p unsafe.Pointer) cuResult
	cuMemcpyHtoD              func(dst uintptr, src unsafe.Pointer, bytes uintptr) cuResult
	cuMemcpyDtoH              func(dst unsafe.Pointer, src uintptr, bytes uintptr) cuResult
	cuMemcpyHtoDAsync         func(dst uintptr, src unsafe.Pointer, bytes uintptr, s cuStream) cuResult
	cuMemcpyDtoHAsync         func(dst unsafe.Pointer, src uintptr, bytes uintptr, s cuStream) cuResult
	cuMemcpyDtoDAsync         func(dst, src uintptr, bytes uintptr, s cuStream) cuResult
	cuMemsetD8Async           func(dst uintptr, v uint8, n uintptr, s cuStream) cuResult
	cuStreamCreate            func(s *cuStream, flags uint32) cuResult
	cuStreamDestroy           func(s cuStream) cuResult
	cuStreamSynchronize       func(s cuStream) cuResult
	cuStreamWaitEvent         func(s cuStream, e cuEvent, flags uint32) cuResult
	cuEventCreate             func(e *cuEvent, flags uint32) cuResult
	cuEventRecord             func(e cuEvent, s cuStream) cuResult
	cuEventQuery              func(e cuEvent) cuResult
	cuEventDestroy            func(e cuEvent) cuResult
	cuGetErrorName            func(r cuResult, s *unsafe.Pointer) cuResult
	cuGetErrorString          func(r cuResult, s *unsafe.Pointer) cuResult
}

var _ driverAPI = (*realDriver)(nil)

// symbols lists every driver entry point with the C name it is bound to.
func (d *realDriver) symbols() []cSymbol {
	return []cSymbol{
		{"cuInit", &d.cuInit},                                     // CUresult cuInit(unsigned int Flags)
		{"cuDriverGetVersion", &d.cuDriverGetVersion},             // (int *driverVersion)
		{"cuDeviceGetCount", &d.cuDeviceGetCount},                 // (int *count)
		{"cuDeviceGet", &d.cuDeviceGet},                           // (CUdevice *device, int ordinal)
		{"cuDeviceGetName", &d.cuDeviceGetName},                   // (char *name, int len, CUdevice dev)
		{"cuDeviceGetAttribute", &d.cuDeviceGetAttribute},         // (int *pi, CUdevice_attribute attrib, CUdevice dev)
		{"cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain}, // (CUcontext *pctx, CUdevice dev)
		{"cuDevicePrimaryCtxRelease_v2", &d.cuDevicePrimaryCtxRelease},
		{"cuCtxSetCurrent", &d.cuCtxSetCurrent},         // (CUcontext ctx)
		{"cuMemAlloc_v2", &d.cuMemAlloc},                // (CUdeviceptr *dptr, size_t bytesize)
		{"cuMemFree_v2", &d.cuMemFree},                  // (CUdeviceptr dptr)
		{"cuMemHostAlloc", &d.cuMemHostAlloc},           // (void **pp, size_t bytesize, unsigned int Flags)
		{"cuMemFreeHost", &d.cuMemFreeHost},             // (void *p)
		{"cuMemcpyHtoD_v2", &d.cuMemcpyHtoD},            // (CUdeviceptr dst, const void *src, size_t n)
		{"cuMemcpyDtoH_v2", &d.cuMemcpyDtoH},            // (void *dst, CUdeviceptr src, size_t n)
		{"cuMemcpyHtoDAsync_v2", &d.cuMemcpyHtoDAsync},  // (CUdeviceptr, const void *, size_t, CUstream)
		{"cuMemcpyDtoHAsync_v2", &d.cuMemcpyDtoHAsync},  // (void *, CUdeviceptr, size_t, CUstream)
		{"cuMemcpyDtoDAsync_v2", &d.cuMemcpyDtoDAsync},  // (CUdeviceptr, CUdeviceptr, size_t, CUstream)
		{"cuMemsetD8Async", &d.cuMemsetD8Async},         // (CUdeviceptr, unsigned char uc, size_t N, CUstream)
		{"cuStreamCreate", &d.cuStreamCreate},           // (CUstream *phStream, unsigned int Flags)
		{"cuStreamDestroy_v2", &d.cuStreamDestroy},      // (CUstream hStream)
		{"cuStreamSynchronize", &d.cuStreamSynchronize}, // (CUstream hStream)
		{"cuStreamWaitEvent", &d.cuStreamWaitEvent},     // (CUstream, CUevent, unsigned int Flags)
		{"cuEventCreate", &d.cuEventCreate},             // (CUevent *phEvent, unsigned int Flags)
		{"cuEventRecord", &d.cuEventRecord},             // (CUevent hEvent, CUstream hStream)
		{"cuEventQuery", &d.cuEventQuery},               // (CUevent hEvent)
		{"cuEventDestroy_v2", &d.cuEventDestroy},        // (CUevent hEvent)
		{"cuGetErrorName", &d.cuGetErrorName},           // (CUresult error, const char **pStr)
		{"cuGetErrorString", &d.cuGetErrorString},       // (CUresult error, const char **pStr)
	}
}

func (d *realDriver) Init(flags uint32) cuResult           { return d.cuInit(flags) }
func (d *realDriver) DriverGetVersion(v *int32) cuResult   { return d.cuDriverGetVersion(v) }
func (d *realDriver) DeviceGetCount(n *int32) cuResult     { return d.cuDeviceGetCount(n) }
func (d *realDriver) CtxSetCurrent(ctx cuContext) cuResult { return d.cuCtxSetCurrent(ctx) }

func (d *realDriver) DeviceGetAttribute(v *int32, attr int32, dev cuDevice) cuResult {
	return d.cuDeviceGetAttribute(v, attr, dev)
}

func (d *realDriver) DeviceGet(dev *cuDevice, ordinal int32) cuResult {
	return d.cuDeviceGet(dev, ordinal)
}

// DeviceGetName reads the name into a buffer of 256 bytes, which holds any
// name the driver reports (they are under 100).
func (d *realDriver) DeviceGetName(dev cuDevice) (string, cuResult) {
	var buf [256]byte
	if r := d.cuDeviceGetName(&buf[0], int32(len(buf)), dev); r != cudaSuccess {
		return "", r
	}
	name, _, _ := bytes.Cut(buf[:], []byte{0})
	return string(name), cudaSuccess
}

func (d *realDriver) DevicePrimaryCtxRetain(ctx *cuContext, dev cuDevice) cuResult {
	return d.cuDevicePrimaryCtxRetain(ctx, dev)
}

func (d *realDriver) DevicePrimaryCtxRelease(dev cuDevice) cuResult {
	return d.cuDevicePrimaryCtxRelease(dev)
}

func (d *realDriver) MemAlloc(ptr *uintptr, bytes uintptr) cuResult { return d.cuMemAlloc(ptr, bytes) }
func (d *realDriver) MemFree(ptr uintptr) cuResult                  { return d.cuMemFree(ptr) }
func (d *realDriver) MemFreeHost(p unsafe.Pointer) cuResult         { return d.cuMemFreeHost(p) }

func (d *realDriver) MemHostAlloc(p *unsafe.Pointer, bytes uintptr, flags uint32) cuResult {
	return d.cuMemHostAlloc(p, bytes, flags)
}

func (d *realDriver) MemcpyHtoD(dst uintptr, src unsafe.Pointer, bytes uintptr) cuResult {
	return d.cuMemcpyHtoD(dst, src, bytes)
}

func (d *realDriver) MemcpyDtoH(dst unsafe.Pointer, src uintptr, bytes uintptr) cuResult {
	return d.cuMemcpyDtoH(dst, src, bytes)
}

func (d *realDriver) MemcpyHtoDAsync(dst uintptr, src unsafe.Pointer, bytes uintptr, s cuStream) cuResult {
	return d.cuMemcpyHtoDAsync(dst, src, bytes, s)
}

func (d *realDriver) MemcpyDtoHAsync(dst unsafe.Pointer, src uintptr, bytes uintptr, s cuStream) cuResult {
	return d.cuMemcpyDtoHAsync(dst, src, bytes, s)
}

func (d *realDriver) MemcpyDtoDAsync(dst, src uintptr, bytes uintptr, s cuStream) cuResult {
	return d.cuMemcpyDtoDAsync(dst, src, bytes, s)
}

func (d *realDriver) MemsetD8Async(dst uintptr, v uint8, n uintptr, s cuStream) cuResult {
	return d.cuMemsetD8Async(dst, v, n, s)
}

func (d *realDriver) StreamCreate(s *cuStream, flags uint32) cuResult {
	return d.cuStreamCreate(s, flags)
}
func (d *realDriver) StreamDestroy(s cuStream) cuResult     { return d.cuStreamDestroy(s) }
func (d *realDriver) StreamSynchronize(s cuStream) cuResult { return d.cuStreamSynchronize(s) }

func (d *realDriver) StreamWaitEvent(s cuStream, e cuEvent, flags uint32) cuResult {
	return d.cuStreamWaitEvent(s, e, flags)
}

func (d *realDriver) EventCreate(e *cuEvent, flags uint32) cuResult { return d.cuEventCreate(e, flags) }
func (d *realDriver) EventRecord(e cuEvent, s cuStream) cuResult    { return d.cuEventRecord(e, s) }
func (d *realDriver) EventQuery(e cuEvent) cuResult                 { return d.cuEventQuery(e) }
func (d *realDriver) EventDestroy(e cuEvent) cuResult               { return d.cuEventDestroy(e) }

// ErrorString is "NAME: description" (cuGetErrorName, cuGetErrorString);
// "" when the driver knows no such code. The driver's strings are static:
// they are copied, never freed.
func (d *realDriver) ErrorString(r cuResult) string {
	var name, text unsafe.Pointer
	if d.cuGetErrorName(r, &name) != cudaSuccess || name == nil {
		return ""
	}
	s := goString(name)
	if d.cuGetErrorString(r, &text) == cudaSuccess && text != nil {
		s += ": " + goString(text)
	}
	return s
}

// realNCCL is ncclAPI over libnccl.so.2 (2.23 or later). NCCL's own
// threading rules apply (a communicator is used by one thread at a time,
// except ncclCommAbort and ncclCommGetAsyncError).
type realNCCL struct {
	ncclGetVersion           func(v *int32) ncclResult
	ncclGetUniqueID          func(id *uniqueID) ncclResult
	ncclCommInitRankScalable func(comm *ncclComm, nranks, rank, nIDs int32, ids *uniqueID, cfg *ncclConfig) ncclResult
	ncclCommSplit            func(comm ncclComm, color, key int32, out *ncclComm, cfg *ncclConfig) ncclResult
	ncclCommFinalize         func(comm ncclComm) ncclResult
	ncclCommDestroy          func(comm ncclComm) ncclResult
	ncclCommAbort            func(comm ncclComm) ncclResult
	ncclCommGetAsyncError    func(comm ncclComm, r *ncclResult) ncclResult
	ncclGetErrorString       func(r ncclResult) string
	ncclGetLastError         func(comm ncclComm) string
	ncclAllReduce            func(send, recv uintptr, count uintptr, dt ncclDataType, op ncclRedOp, comm ncclComm, s cuStream) ncclResult
	ncclBroadcast            func(send, recv uintptr, count uintptr, dt ncclDataType, root int32, comm ncclComm, s cuStream) ncclResult
	ncclReduce               func(send, recv uintptr, count uintptr, dt ncclDataType, op ncclRedOp, root int32, comm ncclComm, s cuStream) ncclResult
	ncclAllGather            func(send, recv uintptr, sendCount uintptr, dt ncclDataType, comm ncclComm, s cuStream) ncclResult
	ncclReduceScatter        func(send, recv uintptr, recvCount uintptr, dt ncclDataType, op ncclRedOp, comm ncclComm, s cuStream) ncclResult
	ncclSend                 func(buf uintptr, count uintptr, dt ncclDataType, peer int32, comm ncclComm, s cuStream) ncclResult
	ncclRecv                 func(buf uintptr, count uintptr, dt ncclDataType, peer int32, comm ncclComm, s cuStream) ncclResult
	ncclGroupStart           func() ncclResult
	ncclGroupEnd             func() ncclResult
	ncclRedOpCreatePreMulSum func(op *ncclRedOp, scalar *byte, dt ncclDataType, residence int32, comm ncclComm) ncclResult
	ncclRedOpDestroy         func(op ncclRedOp, comm ncclComm) ncclResult
}

var _ ncclAPI = (*realNCCL)(nil)

// symbols lists every NCCL entry point with the C name it is bound to; the
// comments are nccl.h's parameters.
func (n *realNCCL) symbols() []cSymbol {
	return []cSymbol{
		{"ncclGetVersion", &n.ncclGetVersion},   // (int *version)
		{"ncclGetUniqueId", &n.ncclGetUniqueID}, // (ncclUniqueId* uniqueId)
		// (ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config)
		{"ncclCommInitRankScalable", &n.ncclCommInitRankScalable},
		// (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t* config)
		{"ncclCommSplit", &n.ncclCommSplit},
		{"ncclCommFinalize", &n.ncclCommFinalize},           // (ncclComm_t comm)
		{"ncclCommDestroy", &n.ncclCommDestroy},             // (ncclComm_t comm)
		{"ncclCommAbort", &n.ncclCommAbort},                 // (ncclComm_t comm)
		{"ncclCommGetAsyncError", &n.ncclCommGetAsyncError}, // (ncclComm_t comm, ncclResult_t *asyncError)
		{"ncclGetErrorString", &n.ncclGetErrorString},       // const char* (ncclResult_t result)
		{"ncclGetLastError", &n.ncclGetLastError},           // const char* (ncclComm_t comm)
		// (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t)
		{"ncclAllReduce", &n.ncclAllReduce},
		// (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t, int root, ncclComm_t, cudaStream_t)
		{"ncclBroadcast", &n.ncclBroadcast},
		// (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t, ncclRedOp_t, int root, ncclComm_t, cudaStream_t)
		{"ncclReduce", &n.ncclReduce},
		// (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t, ncclComm_t, cudaStream_t)
		{"ncclAllGather", &n.ncclAllGather},
		// (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t)
		{"ncclReduceScatter", &n.ncclReduceScatter},
		// (const void* sendbuff, size_t count, ncclDataType_t, int peer, ncclComm_t, cudaStream_t)
		{"ncclSend", &n.ncclSend},
		// (void* recvbuff, size_t count, ncclDataType_t, int peer, ncclComm_t, cudaStream_t)
		{"ncclRecv", &n.ncclRecv},
		{"ncclGroupStart", &n.ncclGroupStart}, // ()
		{"ncclGroupEnd", &n.ncclGroupEnd},     // ()
		// (ncclRedOp_t *op, void *scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm)
		{"ncclRedOpCreatePreMulSum", &n.ncclRedOpCreatePreMulSum},
		{"ncclRedOpDestroy", &n.ncclRedOpDestroy}, // (ncclRedOp_t op, ncclComm_t comm)
	}
}

func (n *realNCCL) GetVersion(v *int32) ncclResult        { return n.ncclGetVersion(v) }
func (n *realNCCL) GetUniqueID(id *uniqueID) ncclResult   { return n.ncclGetUniqueID(id) }
func (n *realNCCL) CommFinalize(comm ncclComm) ncclResult { return n.ncclCommFinalize(comm) }
func (n *realNCCL) CommDestroy(comm ncclComm) ncclResult  { return n.ncclCommDestroy(comm) }
func (n *realNCCL) CommAbort(comm ncclComm) ncclResult    { return n.ncclCommAbort(comm) }
func (n *realNCCL) GetErrorString(r ncclResult) string    { return n.ncclGetErrorString(r) }
func (n *realNCCL) GetLastError(comm ncclComm) string     { return n.ncclGetLastError(comm) }
func (n *realNCCL) GroupStart() ncclResult                { return n.ncclGroupStart() }
func (n *realNCCL) GroupEnd() ncclResult                  { return n.ncclGroupEnd() }

func (n *realNCCL) CommInitRankScalable(comm *ncclComm, nranks, rank int32, nIDs int32, ids *uniqueID, cfg *ncclConfig) ncclResult {
	return n.ncclCommInitRankScalable(comm, nranks, rank, nIDs, ids, cfg)
}

func (n *realNCCL) CommSplit(comm ncclComm, color, key int32, out *ncclComm, cfg *ncclConfig) ncclResult {
	return n.ncclCommSplit(comm, color, key, out, cfg)
}

func (n *realNCCL) RedOpCreatePreMulSum(op *ncclRedOp, scalar *byte, dt ncclDataType, residence int32, comm ncclComm) ncclResult {
	return n.ncclRedOpCreatePreMulSum(op, scalar, dt, residence, comm)
}

func (n *realNCCL) RedOpDestroy(op ncclRedOp, comm ncclComm) ncclResult {
	return n.ncclRedOpDestroy(op, comm)
}

func (n *realNCCL) CommGetAsyncError(comm ncclComm, r *ncclResult) ncclResult {
	return n.ncclCommGetAsyncError(comm, r)
}

func (n *realNCCL) AllReduce(send, recv uintptr, count uintptr, dt ncclDataType, op ncclRedOp, comm ncclComm, s cuStream) ncclResult {
	return n.ncclAllReduce(send, recv, count, dt, op, comm, s)
}

func (n *realNCCL) Broadcast(send, recv uintptr, count uintptr, dt ncclDataType, root int32, comm ncclComm, s cuStream) ncclResult {
	return n.ncclBroadcast(send, recv, count, dt, root, comm, s)
}

func (n *realNCCL) Reduce(send, recv uintptr, count uintptr, dt ncclDataType, op ncclRedOp, root int32, comm ncclComm, s cuStream) ncclResult {
	return n.ncclReduce(send, recv, count, dt, op, root, comm, s)
}

func (n *realNCCL) AllGather(send, recv uintptr, sendCount uintptr, dt ncclDataType, comm ncclComm, s cuStream) ncclResult {
	return n.ncclAllGather(send, recv, sendCount, dt, comm, s)
}

func (n *realNCCL) ReduceScatter(send, recv uintptr, recvCount uintptr, dt ncclDataType, op ncclRedOp, comm ncclComm, s cuStream) ncclResult {
	return n.ncclReduceScatter(send, recv, recvCount, dt, op, comm, s)
}

func (n *realNCCL) Send(buf uintptr, count uintptr, dt ncclDataType, peer int32, comm ncclComm, s cuStream) ncclResult {
	return n.ncclSend(buf, count, dt, peer, comm, s)
}

func (n *realNCCL) Recv(buf uintptr, count uintptr, dt ncclDataType, peer int32, comm ncclComm, s cuStream) ncclResult {
	return n.ncclRecv(buf, count, dt, peer, comm, s)
}
