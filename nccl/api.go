package nccl

import "unsafe"

// The function table: the CUDA driver and NCCL entry points this package
// calls, as Go methods. Two implementations exist: the real libraries,
// bound at run time with purego (real.go), and an in-process fake with
// host memory standing in for device memory (fake.go), so that every line
// of Comm, Device and the staging runs in tests on machines without a GPU.
//
// Contract shared by both:
//   - Methods return the library's own status code (cuResult, ncclResult);
//     the caller turns a non-zero code into an error (errors.go). Out
//     parameters are Go pointers, valid for the call only.
//   - Driver calls act on the context current on the calling OS thread:
//     callers run them on a Device's locked thread (device.go). The fake
//     ignores threads but keeps every other rule.
//   - "Async" copies and NCCL operations are queued on a stream and return
//     at once; they run in stream order. Completion is observed through an
//     event recorded after them (EventQuery → cudaSuccess, or
//     cudaErrorNotReady while pending) or StreamSynchronize.
//   - A non-blocking NCCL communicator (Config.blocking = 0) may return
//     ncclInProgress from init, split and any operation; the operation is
//     complete once CommGetAsyncError stops reporting ncclInProgress.
//   - CommAbort may be called while operations are queued or running on
//     the communicator's streams: they end (with garbage results), so the
//     streams drain and events complete.

type (
	cuResult   int32
	ncclResult int32

	cuDevice  int32
	cuContext uintptr
	cuStream  uintptr
	cuEvent   uintptr
	ncclComm  uintptr

	// ncclDataType is ncclDataType_t, ncclRedOp is ncclRedOp_t.
	ncclDataType int32
	ncclRedOp    int32
)

// uniqueID is ncclUniqueId: 128 opaque bytes (NCCL_UNIQUE_ID_BYTES).
type uniqueID [uniqueIDBytes]byte

const uniqueIDBytes = 128

// driverAPI is the part of the CUDA driver API a communicator needs.
type driverAPI interface {
	Init(flags uint32) cuResult
	DriverGetVersion(v *int32) cuResult
	DeviceGetCount(n *int32) cuResult
	DeviceGet(d *cuDevice, ordinal int32) cuResult
	DeviceGetName(ordinal cuDevice) (string, cuResult)
	DevicePrimaryCtxRetain(ctx *cuContext, d cuDevice) cuResult
	DevicePrimaryCtxRelease(d cuDevice) cuResult
	CtxSetCurrent(ctx cuContext) cuResult

	MemAlloc(ptr *uintptr, bytes uintptr) cuResult
	MemFree(ptr uintptr) cuResult
	// MemHostAlloc returns page-locked host memory (CU_MEMHOSTALLOC_PORTABLE).
	MemHostAlloc(p *unsafe.Pointer, bytes uintptr, flags uint32) cuResult
	MemFreeHost(p unsafe.Pointer) cuResult

	// Synchronous copies between Go memory and the device (the call
	// returns when the copy is done, so Go memory need not be pinned).
	MemcpyHtoD(dst uintptr, src unsafe.Pointer, bytes uintptr) cuResult
	MemcpyDtoH(dst unsafe.Pointer, src uintptr, bytes uintptr) cuResult
	// Asynchronous copies; host memory must be page-locked (MemHostAlloc).
	MemcpyHtoDAsync(dst uintptr, src unsafe.Pointer, bytes uintptr, s cuStream) cuResult
	MemcpyDtoHAsync(dst unsafe.Pointer, src uintptr, bytes uintptr, s cuStream) cuResult
	MemcpyDtoDAsync(dst, src uintptr, bytes uintptr, s cuStream) cuResult
	MemsetD8Async(dst uintptr, v uint8, n uintptr, s cuStream) cuResult

	StreamCreate(s *cuStream, flags uint32) cuResult
	StreamDestroy(s cuStream) cuResult
	StreamSynchronize(s cuStream) cuResult
	StreamWaitEvent(s cuStream, e cuEvent, flags uint32) cuResult
	EventCreate(e *cuEvent, flags uint32) cuResult
	EventRecord(e cuEvent, s cuStream) cuResult
	EventQuery(e cuEvent) cuResult
	EventDestroy(e cuEvent) cuResult

	// ErrorString is cuGetErrorName and cuGetErrorString joined ("" when
	// the driver knows no such code).
	ErrorString(r cuResult) string
}

// ncclAPI is the part of NCCL a communicator needs.
type ncclAPI interface {
	GetVersion(v *int32) ncclResult
	GetUniqueID(id *uniqueID) ncclResult
	// CommInitRankScalable: ids points at nIDs unique ids (NCCL ≥ 2.23).
	CommInitRankScalable(comm *ncclComm, nranks, rank int32, nIDs int32, ids *uniqueID, cfg *ncclConfig) ncclResult
	CommSplit(comm ncclComm, color, key int32, out *ncclComm, cfg *ncclConfig) ncclResult
	CommFinalize(comm ncclComm) ncclResult
	CommDestroy(comm ncclComm) ncclResult
	CommAbort(comm ncclComm) ncclResult
	CommGetAsyncError(comm ncclComm, r *ncclResult) ncclResult
	GetErrorString(r ncclResult) string
	// GetLastError is the text of the last error on comm (or of the last
	// error of the calling thread when comm is 0).
	GetLastError(comm ncclComm) string

	AllReduce(send, recv uintptr, count uintptr, dt ncclDataType, op ncclRedOp, comm ncclComm, s cuStream) ncclResult
	Broadcast(send, recv uintptr, count uintptr, dt ncclDataType, root int32, comm ncclComm, s cuStream) ncclResult
	Reduce(send, recv uintptr, count uintptr, dt ncclDataType, op ncclRedOp, root int32, comm ncclComm, s cuStream) ncclResult
	AllGather(send, recv uintptr, sendCount uintptr, dt ncclDataType, comm ncclComm, s cuStream) ncclResult
	ReduceScatter(send, recv uintptr, recvCount uintptr, dt ncclDataType, op ncclRedOp, comm ncclComm, s cuStream) ncclResult
	Send(buf uintptr, count uintptr, dt ncclDataType, peer int32, comm ncclComm, s cuStream) ncclResult
	Recv(buf uintptr, count uintptr, dt ncclDataType, peer int32, comm ncclComm, s cuStream) ncclResult
	GroupStart() ncclResult
	GroupEnd() ncclResult
}
