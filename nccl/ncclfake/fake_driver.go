package ncclfake

import (
	"fmt"

	"github.com/hiercomm/hiercomm/nccl/internal/cuapi"
)

// The fake CUDA driver: devices, primary contexts (current per OS thread)
// and error strings. Memory and copies are in fake_memory.go, streams and
// events in fake_stream.go.

// fakeDriver implements cuapi.Driver over a fakeWorld.
type fakeDriver struct{ w *fakeWorld }

var _ cuapi.Driver = fakeDriver{}

const (
	// fakeStreamLegacy is CU_STREAM_LEGACY, which names stream 0 too.
	fakeStreamLegacy cuapi.Stream = 1
	// fakeEventFlags are the CU_EVENT_* bits (BLOCKING_SYNC,
	// DISABLE_TIMING, INTERPROCESS).
	fakeEventFlags = 0x7
)

// fakeCtx is a device's primary context.
type fakeCtx struct {
	h      cuapi.Context
	dev    int
	refs   int         // DevicePrimaryCtxRetain minus Release
	legacy *fakeStream // its stream 0, made on first use
}

// legacyStream returns c's stream 0. The caller holds w.mu.
func (c *fakeCtx) legacyStream() *fakeStream {
	if c.legacy == nil {
		c.legacy = &fakeStream{ctx: c}
	}
	return c.legacy
}

// checkInit is CUDA_ERROR_NOT_INITIALIZED before Init. The caller holds
// w.mu.
func (w *fakeWorld) checkInit() cuapi.CUResult {
	if !w.initialized {
		return cuapi.CUDAErrorNotInitialized
	}
	return cuapi.CUDASuccess
}

// locked runs f with w.mu held once the driver is initialized (else it is
// CUDA_ERROR_NOT_INITIALIZED): the frame of the driver calls that need
// Init. f may release w.mu while it waits, provided it takes it again
// before returning.
func (w *fakeWorld) locked(f func() cuapi.CUResult) cuapi.CUResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.checkInit(); r != cuapi.CUDASuccess {
		return r
	}
	return f()
}

// Init accepts flags 0 only, as cuInit does.
func (d fakeDriver) Init(flags uint32) cuapi.CUResult {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case flags != 0:
		return cuapi.CUDAErrorInvalidValue
	case w.opt.Devices == 0:
		return cuapi.CUDAErrorNoDevice
	}
	w.initialized = true
	return cuapi.CUDASuccess
}

// DriverGetVersion works before Init, as cuDriverGetVersion does.
func (d fakeDriver) DriverGetVersion(v *int32) cuapi.CUResult {
	if v == nil {
		return cuapi.CUDAErrorInvalidValue
	}
	*v = int32(d.w.opt.DriverVersion)
	return cuapi.CUDASuccess
}

func (d fakeDriver) DeviceGetCount(n *int32) cuapi.CUResult {
	w := d.w
	return w.locked(func() cuapi.CUResult {
		if n == nil {
			return cuapi.CUDAErrorInvalidValue
		}
		*n = int32(w.opt.Devices)
		return cuapi.CUDASuccess
	})
}

// device checks an ordinal. The caller holds w.mu.
func (w *fakeWorld) device(ordinal int) cuapi.CUResult {
	if r := w.checkInit(); r != cuapi.CUDASuccess {
		return r
	}
	if ordinal < 0 || ordinal >= w.opt.Devices {
		return cuapi.CUDAErrorInvalidDevice
	}
	return cuapi.CUDASuccess
}

func (d fakeDriver) DeviceGet(dev *cuapi.Device, ordinal int32) cuapi.CUResult {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.device(int(ordinal)); r != cuapi.CUDASuccess {
		return r
	}
	if dev == nil {
		return cuapi.CUDAErrorInvalidValue
	}
	*dev = cuapi.Device(ordinal)
	return cuapi.CUDASuccess
}

// DeviceGetAttribute knows the compute capability (Options.ComputeCapability).
func (d fakeDriver) DeviceGetAttribute(v *int32, attr int32, ordinal cuapi.Device) cuapi.CUResult {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.device(int(ordinal)); r != cuapi.CUDASuccess {
		return r
	}
	switch attr {
	case cuapi.AttrComputeCapabilityMajor:
		*v = int32(w.opt.ComputeCapability / 10)
	case cuapi.AttrComputeCapabilityMinor:
		*v = int32(w.opt.ComputeCapability % 10)
	default:
		return cuapi.CUDAErrorInvalidValue
	}
	return cuapi.CUDASuccess
}

func (d fakeDriver) DeviceGetName(ordinal cuapi.Device) (string, cuapi.CUResult) {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.device(int(ordinal)); r != cuapi.CUDASuccess {
		return "", r
	}
	return fmt.Sprintf("fake GPU %d", ordinal), cuapi.CUDASuccess
}

// DevicePrimaryCtxRetain returns the same context for a device every time.
func (d fakeDriver) DevicePrimaryCtxRetain(ctx *cuapi.Context, dev cuapi.Device) cuapi.CUResult {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.device(int(dev)); r != cuapi.CUDASuccess {
		return r
	}
	if ctx == nil {
		return cuapi.CUDAErrorInvalidValue
	}
	c := w.ctxs[dev]
	if c == nil {
		c = &fakeCtx{h: cuapi.Context(w.handle()), dev: int(dev)}
		w.ctxs[dev] = c
		w.ctxByHandle[c.h] = c
	}
	c.refs++
	*ctx = c.h
	return cuapi.CUDASuccess
}

func (d fakeDriver) DevicePrimaryCtxRelease(dev cuapi.Device) cuapi.CUResult {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.device(int(dev)); r != cuapi.CUDASuccess {
		return r
	}
	c := w.ctxs[dev]
	if c == nil || c.refs == 0 {
		return cuapi.CUDAErrorInvalidContext
	}
	c.refs--
	return cuapi.CUDASuccess
}

// CtxSetCurrent makes ctx current on the calling OS thread (0: none).
func (d fakeDriver) CtxSetCurrent(ctx cuapi.Context) cuapi.CUResult {
	w := d.w
	return w.locked(func() cuapi.CUResult {
		var c *fakeCtx
		if ctx != 0 {
			if c = w.ctxByHandle[ctx]; c == nil {
				return cuapi.CUDAErrorInvalidContext
			}
		}
		w.thread().ctx = c
		return cuapi.CUDASuccess
	})
}

// fakeCUErrors are cuGetErrorName and cuGetErrorString of the codes in
// abi.go, in the driver's words.
var fakeCUErrors = map[cuapi.CUResult][2]string{
	cuapi.CUDASuccess:             {"CUDA_SUCCESS", "no error"},
	cuapi.CUDAErrorInvalidValue:   {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	cuapi.CUDAErrorOutOfMemory:    {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	cuapi.CUDAErrorNotInitialized: {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	cuapi.CUDAErrorNoDevice:       {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	cuapi.CUDAErrorInvalidDevice:  {"CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	cuapi.CUDAErrorInvalidContext: {"CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	cuapi.CUDAErrorNotReady:       {"CUDA_ERROR_NOT_READY", "device not ready"},
	cuapi.CUDAErrorIllegalAddress: {"CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
}

// ErrorString is "NAME: text", or "" for a code the fake does not know.
func (d fakeDriver) ErrorString(r cuapi.CUResult) string {
	e, ok := fakeCUErrors[r]
	if !ok {
		return ""
	}
	return e[0] + ": " + e[1]
}
