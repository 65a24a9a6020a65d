package nccl

import "fmt"

// The fake CUDA driver: devices, primary contexts (current per OS thread)
// and error strings. Memory and copies are in fake_memory.go, streams and
// events in fake_stream.go.

// fakeDriver implements driverAPI over a fakeWorld.
type fakeDriver struct{ w *fakeWorld }

var _ driverAPI = fakeDriver{}

const (
	// fakeStreamLegacy is CU_STREAM_LEGACY, which names stream 0 too.
	fakeStreamLegacy cuStream = 1
	// fakeEventFlags are the CU_EVENT_* bits (BLOCKING_SYNC,
	// DISABLE_TIMING, INTERPROCESS).
	fakeEventFlags = 0x7
)

// fakeCtx is a device's primary context.
type fakeCtx struct {
	h      cuContext
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
func (w *fakeWorld) checkInit() cuResult {
	if !w.initialized {
		return cudaErrorNotInitialized
	}
	return cudaSuccess
}

// locked runs f with w.mu held once the driver is initialized (else it is
// CUDA_ERROR_NOT_INITIALIZED): the frame of the driver calls that need
// Init. f may release w.mu while it waits, provided it takes it again
// before returning.
func (w *fakeWorld) locked(f func() cuResult) cuResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.checkInit(); r != cudaSuccess {
		return r
	}
	return f()
}

// Init accepts flags 0 only, as cuInit does.
func (d fakeDriver) Init(flags uint32) cuResult {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case flags != 0:
		return cudaErrorInvalidValue
	case w.opt.Devices == 0:
		return cudaErrorNoDevice
	}
	w.initialized = true
	return cudaSuccess
}

// DriverGetVersion works before Init, as cuDriverGetVersion does.
func (d fakeDriver) DriverGetVersion(v *int32) cuResult {
	if v == nil {
		return cudaErrorInvalidValue
	}
	*v = int32(d.w.opt.DriverVersion)
	return cudaSuccess
}

func (d fakeDriver) DeviceGetCount(n *int32) cuResult {
	w := d.w
	return w.locked(func() cuResult {
		if n == nil {
			return cudaErrorInvalidValue
		}
		*n = int32(w.opt.Devices)
		return cudaSuccess
	})
}

// device checks an ordinal. The caller holds w.mu.
func (w *fakeWorld) device(ordinal int) cuResult {
	if r := w.checkInit(); r != cudaSuccess {
		return r
	}
	if ordinal < 0 || ordinal >= w.opt.Devices {
		return cudaErrorInvalidDevice
	}
	return cudaSuccess
}

func (d fakeDriver) DeviceGet(dev *cuDevice, ordinal int32) cuResult {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.device(int(ordinal)); r != cudaSuccess {
		return r
	}
	if dev == nil {
		return cudaErrorInvalidValue
	}
	*dev = cuDevice(ordinal)
	return cudaSuccess
}

func (d fakeDriver) DeviceGetName(ordinal cuDevice) (string, cuResult) {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.device(int(ordinal)); r != cudaSuccess {
		return "", r
	}
	return fmt.Sprintf("fake GPU %d", ordinal), cudaSuccess
}

// DevicePrimaryCtxRetain returns the same context for a device every time.
func (d fakeDriver) DevicePrimaryCtxRetain(ctx *cuContext, dev cuDevice) cuResult {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.device(int(dev)); r != cudaSuccess {
		return r
	}
	if ctx == nil {
		return cudaErrorInvalidValue
	}
	c := w.ctxs[dev]
	if c == nil {
		c = &fakeCtx{h: cuContext(w.handle()), dev: int(dev)}
		w.ctxs[dev] = c
		w.ctxByHandle[c.h] = c
	}
	c.refs++
	*ctx = c.h
	return cudaSuccess
}

func (d fakeDriver) DevicePrimaryCtxRelease(dev cuDevice) cuResult {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.device(int(dev)); r != cudaSuccess {
		return r
	}
	c := w.ctxs[dev]
	if c == nil || c.refs == 0 {
		return cudaErrorInvalidContext
	}
	c.refs--
	return cudaSuccess
}

// CtxSetCurrent makes ctx current on the calling OS thread (0: none).
func (d fakeDriver) CtxSetCurrent(ctx cuContext) cuResult {
	w := d.w
	return w.locked(func() cuResult {
		var c *fakeCtx
		if ctx != 0 {
			if c = w.ctxByHandle[ctx]; c == nil {
				return cudaErrorInvalidContext
			}
		}
		w.thread().ctx = c
		return cudaSuccess
	})
}

// fakeCUErrors are cuGetErrorName and cuGetErrorString of the codes in
// abi.go, in the driver's words.
var fakeCUErrors = map[cuResult][2]string{
	cudaSuccess:             {"CUDA_SUCCESS", "no error"},
	cudaErrorInvalidValue:   {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	cudaErrorOutOfMemory:    {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	cudaErrorNotInitialized: {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	cudaErrorNoDevice:       {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	cudaErrorInvalidDevice:  {"CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	cudaErrorInvalidContext: {"CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	cudaErrorNotReady:       {"CUDA_ERROR_NOT_READY", "device not ready"},
	cudaErrorIllegalAddress: {"CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
}

// ErrorString is "NAME: text", or "" for a code the fake does not know.
func (d fakeDriver) ErrorString(r cuResult) string {
	e, ok := fakeCUErrors[r]
	if !ok {
		return ""
	}
	return e[0] + ": " + e[1]
}
