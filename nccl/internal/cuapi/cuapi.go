// Package cuapi is the seam between package nccl and the libraries it
// drives: the CUDA driver and NCCL entry points nccl calls, as a function
// table (Driver, NCCL), and the ABI they share (result codes, handles,
// ncclConfig_t, NVIDIA's constants). Two implementations exist: the real
// libraries, bound at run time with purego (nccl's real.go), and an
// in-process fake with host memory standing in for device memory
// (nccl/ncclfake), so that every line of nccl's Comm, Device and staging
// runs in tests on machines without a GPU. A Table is one implementation;
// nccl makes a *nccl.Library of it (NewLibrary).
//
// cuapi imports nothing of ours (internal/rules/imports_test.go holds it
// to that); only nccl and nccl/ncclfake import it.
package cuapi

import (
	"fmt"
	"unsafe"
)

// The function table: the CUDA driver and NCCL entry points package nccl
// calls, as Go methods. Contract shared by both implementations:
//   - Methods return the library's own status code (CUResult, NCCLResult);
//     the caller turns a non-zero code into an error (nccl's errors.go). Out
//     parameters are Go pointers, valid for the call only.
//   - Driver calls act on the context current on the calling OS thread:
//     callers run them on a Device's locked thread (nccl's device.go). The fake
//     ignores threads but keeps every other rule.
//   - "Async" copies and NCCL operations are queued on a stream and return
//     at once; they run in stream order. Completion is observed through an
//     event recorded after them (EventQuery → CUDASuccess, or
//     CUDAErrorNotReady while pending) or StreamSynchronize.
//   - A non-blocking NCCL communicator (Config.Blocking = 0) may return
//     NCCLInProgress from init, split and any operation; the operation is
//     complete once CommGetAsyncError stops reporting NCCLInProgress.
//   - CommAbort may be called while operations are queued or running on
//     the communicator's streams: they end (with garbage results), so the
//     streams drain and events complete.

type (
	CUResult   int32
	NCCLResult int32

	Device  int32
	Context uintptr
	Stream  uintptr
	Event   uintptr
	Comm    uintptr

	// DataType is ncclDataType_t, RedOp is ncclRedOp_t.
	DataType int32
	RedOp    int32
)

// UniqueID is ncclUniqueId: 128 opaque bytes (NCCL_UNIQUE_ID_BYTES).
type UniqueID [UniqueIDBytes]byte

const UniqueIDBytes = 128

// Driver is the part of the CUDA driver API a communicator needs.
type Driver interface {
	Init(flags uint32) CUResult
	DriverGetVersion(v *int32) CUResult
	DeviceGetCount(n *int32) CUResult
	DeviceGet(d *Device, ordinal int32) CUResult
	DeviceGetName(ordinal Device) (string, CUResult)
	// DeviceGetAttribute reads one CUdevice_attribute of d (here
	// AttrComputeCapabilityMajor and Minor).
	DeviceGetAttribute(v *int32, attr int32, d Device) CUResult
	DevicePrimaryCtxRetain(ctx *Context, d Device) CUResult
	DevicePrimaryCtxRelease(d Device) CUResult
	CtxSetCurrent(ctx Context) CUResult

	MemAlloc(ptr *uintptr, bytes uintptr) CUResult
	MemFree(ptr uintptr) CUResult
	// MemHostAlloc returns page-locked host memory (CU_MEMHOSTALLOC_PORTABLE).
	MemHostAlloc(p *unsafe.Pointer, bytes uintptr, flags uint32) CUResult
	MemFreeHost(p unsafe.Pointer) CUResult

	// Synchronous copies between Go memory and the device (the call
	// returns when the copy is done, so Go memory need not be pinned).
	MemcpyHtoD(dst uintptr, src unsafe.Pointer, bytes uintptr) CUResult
	MemcpyDtoH(dst unsafe.Pointer, src uintptr, bytes uintptr) CUResult
	// Asynchronous copies; host memory must be page-locked (MemHostAlloc).
	MemcpyHtoDAsync(dst uintptr, src unsafe.Pointer, bytes uintptr, s Stream) CUResult
	MemcpyDtoHAsync(dst unsafe.Pointer, src uintptr, bytes uintptr, s Stream) CUResult
	MemcpyDtoDAsync(dst, src uintptr, bytes uintptr, s Stream) CUResult
	MemsetD8Async(dst uintptr, v uint8, n uintptr, s Stream) CUResult

	StreamCreate(s *Stream, flags uint32) CUResult
	StreamDestroy(s Stream) CUResult
	StreamSynchronize(s Stream) CUResult
	StreamWaitEvent(s Stream, e Event, flags uint32) CUResult
	EventCreate(e *Event, flags uint32) CUResult
	EventRecord(e Event, s Stream) CUResult
	EventQuery(e Event) CUResult
	EventDestroy(e Event) CUResult

	// ErrorString is cuGetErrorName and cuGetErrorString joined ("" when
	// the driver knows no such code).
	ErrorString(r CUResult) string
}

// NCCL is the part of NCCL a communicator needs.
type NCCL interface {
	GetVersion(v *int32) NCCLResult
	GetUniqueID(id *UniqueID) NCCLResult
	// CommInitRankScalable: ids points at nIDs unique ids (NCCL ≥ 2.23).
	CommInitRankScalable(comm *Comm, nranks, rank int32, nIDs int32, ids *UniqueID, cfg *Config) NCCLResult
	CommSplit(comm Comm, color, key int32, out *Comm, cfg *Config) NCCLResult
	CommFinalize(comm Comm) NCCLResult
	CommDestroy(comm Comm) NCCLResult
	CommAbort(comm Comm) NCCLResult
	CommGetAsyncError(comm Comm, r *NCCLResult) NCCLResult
	GetErrorString(r NCCLResult) string
	// GetLastError is the text of the last error on comm (or of the last
	// error of the calling thread when comm is 0).
	GetLastError(comm Comm) string

	AllReduce(send, recv uintptr, count uintptr, dt DataType, op RedOp, comm Comm, s Stream) NCCLResult
	Broadcast(send, recv uintptr, count uintptr, dt DataType, root int32, comm Comm, s Stream) NCCLResult
	Reduce(send, recv uintptr, count uintptr, dt DataType, op RedOp, root int32, comm Comm, s Stream) NCCLResult
	AllGather(send, recv uintptr, sendCount uintptr, dt DataType, comm Comm, s Stream) NCCLResult
	ReduceScatter(send, recv uintptr, recvCount uintptr, dt DataType, op RedOp, comm Comm, s Stream) NCCLResult
	Send(buf uintptr, count uintptr, dt DataType, peer int32, comm Comm, s Stream) NCCLResult
	Recv(buf uintptr, count uintptr, dt DataType, peer int32, comm Comm, s Stream) NCCLResult
	GroupStart() NCCLResult
	GroupEnd() NCCLResult
	// RedOpCreatePreMulSum makes a PreMulSum op for collectives of dt on
	// comm, with the scalar (one value of dt) at scalar; residence
	// ScalarHostImmediate reads it from host memory before returning.
	RedOpCreatePreMulSum(op *RedOp, scalar *byte, dt DataType, residence int32, comm Comm) NCCLResult
	// RedOpDestroy releases an op RedOpCreatePreMulSum made, as soon as the
	// last call given it has returned.
	RedOpDestroy(op RedOp, comm Comm) NCCLResult
}

// The ABI: every value and layout below is NVIDIA's, from nccl.h
// (NVIDIA/nccl src/nccl.h.in) and cuda.h; nccl's abi_test.go holds each
// against the header line it comes from.

// ncclResult_t.
const (
	NCCLSuccess            NCCLResult = 0
	NCCLUnhandledCudaError NCCLResult = 1
	NCCLSystemError        NCCLResult = 2
	NCCLInternalError      NCCLResult = 3
	NCCLInvalidArgument    NCCLResult = 4
	NCCLInvalidUsage       NCCLResult = 5
	NCCLRemoteError        NCCLResult = 6
	NCCLInProgress         NCCLResult = 7
	NCCLTimeout            NCCLResult = 8
)

// ncclDataType_t.
const (
	NCCLInt8     DataType = 0
	NCCLUint8    DataType = 1
	NCCLInt32    DataType = 2
	NCCLUint32   DataType = 3
	NCCLInt64    DataType = 4
	NCCLUint64   DataType = 5
	NCCLFloat16  DataType = 6
	NCCLFloat32  DataType = 7
	NCCLFloat64  DataType = 8
	NCCLBfloat16 DataType = 9
	// NCCL 2.24 and later (FP8VersionCode).
	NCCLFloat8e4m3 DataType = 10
	NCCLFloat8e5m2 DataType = 11
)

// ncclRedOp_t.
const (
	NCCLSum  RedOp = 0
	NCCLProd RedOp = 1
	NCCLMax  RedOp = 2
	NCCLMin  RedOp = 3
	NCCLAvg  RedOp = 4
	// NCCLNumOps is the number of built-in ops: RedOpCreatePreMulSum's
	// ops are numbered from it on.
	NCCLNumOps RedOp = 5
)

// ncclScalarResidence_t.
const (
	ScalarDevice        = 0
	ScalarHostImmediate = 1
)

// FP8VersionCode is the first NCCL with ncclFloat8e4m3 and ncclFloat8e5m2
// (2.24.3).
const FP8VersionCode = 22403

const (
	APIMagic          = 0xcafebeef // NCCL_API_MAGIC
	ConfigUndef       = -1 << 31   // NCCL_CONFIG_UNDEF_INT (INT_MIN)
	SplitNoColor      = -1         // NCCL_SPLIT_NOCOLOR
	MinVersionCode    = 22300      // ncclCommInitRankScalable appeared in 2.23.0
	ConfigVersionCode = 22300      // the ncclConfig_t layout filled below is 2.23's
)

// Config is ncclConfig_t as NCCL 2.23 lays it out (the oldest release
// with ncclCommInitRankScalable): nccl.h.in at v2.23.4-1 (struct
// ncclConfig_v21700) ends at splitShare; trafficClass came in 2.26,
// commName … nvlsCTAs in 2.27, later fields after. NCCL's parseCommConfig
// (init.cc) copies min(size, its own sizeof) bytes over its
// NCCL_CONFIG_INITIALIZER and resets every field newer than the version
// field to its default, so every later release accepts this config with
// the fields it added left unset.
type Config struct {
	Size           uintptr
	Magic          uint32
	Version        uint32
	Blocking       int32
	CGAClusterSize int32
	MinCTAs        int32
	MaxCTAs        int32
	NetName        unsafe.Pointer
	SplitShare     int32
}

// NewConfig returns a config with every field unset but blocking.
func NewConfig(blocking bool) Config {
	u := int32(ConfigUndef)
	c := Config{
		Size: unsafe.Sizeof(Config{}), Magic: APIMagic, Version: ConfigVersionCode,
		CGAClusterSize: u, MinCTAs: u, MaxCTAs: u, SplitShare: u,
	}
	c.Blocking = 0
	if blocking {
		c.Blocking = 1
	}
	return c
}

// CUresult codes this package tells apart (cuda.h).
const (
	CUDASuccess                CUResult = 0   // CUDA_SUCCESS
	CUDAErrorInvalidValue      CUResult = 1   // CUDA_ERROR_INVALID_VALUE
	CUDAErrorOutOfMemory       CUResult = 2   // CUDA_ERROR_OUT_OF_MEMORY
	CUDAErrorNotInitialized    CUResult = 3   // CUDA_ERROR_NOT_INITIALIZED
	CUDAErrorNoDevice          CUResult = 100 // CUDA_ERROR_NO_DEVICE
	CUDAErrorInvalidDevice     CUResult = 101 // CUDA_ERROR_INVALID_DEVICE
	CUDAErrorInvalidContext    CUResult = 201 // CUDA_ERROR_INVALID_CONTEXT
	CUDAErrorNotReady          CUResult = 600 // CUDA_ERROR_NOT_READY
	CUDAErrorIllegalAddress    CUResult = 700 // CUDA_ERROR_ILLEGAL_ADDRESS
	AttrComputeCapabilityMajor          = 75  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	AttrComputeCapabilityMinor          = 76  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	StreamNonBlocking                   = 0x1 // CU_STREAM_NON_BLOCKING
	EventDisableTiming                  = 0x2 // CU_EVENT_DISABLE_TIMING
	MemHostAllocPortable                = 0x1 // CU_MEMHOSTALLOC_PORTABLE
)

// VersionString spells an NCCL version code: 10000·major + 100·minor
// + patch since 2.9, 1000·major + 100·minor + patch before (nccl.h's
// NCCL_VERSION).
func VersionString(code int) string {
	if code >= 10000 {
		return fmt.Sprintf("%d.%d.%d", code/10000, code/100%100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/1000, code/100%10, code%100)
}

// A Table is one implementation of the CUDA driver and NCCL: the real
// libraries or the fake.
type Table struct {
	Driver Driver
	NCCL   NCCL
	// DriverVersion is cuDriverGetVersion's (e.g. 12020); NCCLVersion is
	// ncclGetVersion's code (e.g. 22803).
	DriverVersion, NCCLVersion int
	// Where says which files were loaded (or "fake (...)"), for logs and
	// errors: the Library's String.
	Where string
}

// NewLibrary makes a *nccl.Library of a table (the result is that
// pointer, as an any). Package nccl sets it when it is initialized, so
// that nccl/ncclfake can hand nccl its table without nccl exporting a
// constructor that takes one: importing nccl, as ncclfake does, runs that
// initialization first.
var NewLibrary func(Table) any

// TableOf returns the table behind a *nccl.Library (given as an any), for
// nccl/ncclfake's test helpers. Package nccl sets it with NewLibrary.
var TableOf func(lib any) Table
