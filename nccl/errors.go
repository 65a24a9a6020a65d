package nccl

import (
	"errors"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
)

// CUDAError is a failed CUDA driver call.
type CUDAError struct {
	Call string // the call and what it was for, e.g. "cuMemAlloc(4096 bytes) on device 0"
	Code int    // the CUresult
	Text string // cuGetErrorName: cuGetErrorString
}

func (e *CUDAError) Error() string {
	if e.Text == "" {
		return fmt.Sprintf("%s failed with CUresult %d", e.Call, e.Code)
	}
	return fmt.Sprintf("%s failed: %s (CUresult %d)", e.Call, e.Text, e.Code)
}

// NCCLError is a failed NCCL call, with NCCL's own text for it
// (ncclGetErrorString, and ncclGetLastError's detail where NCCL has one).
type NCCLError struct {
	Call   string // e.g. "ncclAllReduce"
	Code   int    // the ncclResult_t
	Text   string // ncclGetErrorString
	Detail string // ncclGetLastError
}

func (e *NCCLError) Error() string {
	s := fmt.Sprintf("%s failed: %s (ncclResult %d)", e.Call, e.Text, e.Code)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is makes NCCL's timeout, remote error and invalid arguments comparable
// with comm's sentinels.
func (e *NCCLError) Is(target error) bool {
	switch ncclResult(e.Code) {
	case ncclTimeout:
		return target == comm.ErrTimeout
	case ncclRemoteError:
		return target == comm.ErrPeerFailed
	case ncclInvalidArgument:
		return target == comm.ErrInvalidArgument
	}
	return false
}

// ErrUnavailable is wrapped by every error that says the GPU tier cannot be
// used on this machine (no library, no device, too old a version).
var ErrUnavailable = errors.New("nccl: GPU tier unavailable")

func (l *Library) cuError(call string, r cuResult) error {
	return &CUDAError{Call: call, Code: int(r), Text: l.drv.ErrorString(r)}
}

func (l *Library) ncclError(call string, r ncclResult, c ncclComm) error {
	return &NCCLError{Call: call, Code: int(r), Text: l.nccl.GetErrorString(r), Detail: l.nccl.GetLastError(c)}
}
