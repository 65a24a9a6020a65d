package nccl

import "unsafe"

// The ABI: every value and layout below is NVIDIA's, from nccl.h
// (NVIDIA/nccl src/nccl.h.in) and cuda.h; abi_test.go holds each against
// the header line it comes from.

// ncclResult_t.
const (
	ncclSuccess            ncclResult = 0
	ncclUnhandledCudaError ncclResult = 1
	ncclSystemError        ncclResult = 2
	ncclInternalError      ncclResult = 3
	ncclInvalidArgument    ncclResult = 4
	ncclInvalidUsage       ncclResult = 5
	ncclRemoteError        ncclResult = 6
	ncclInProgress         ncclResult = 7
	ncclTimeout            ncclResult = 8
)

// ncclDataType_t.
const (
	ncclInt8     ncclDataType = 0
	ncclUint8    ncclDataType = 1
	ncclInt32    ncclDataType = 2
	ncclUint32   ncclDataType = 3
	ncclInt64    ncclDataType = 4
	ncclUint64   ncclDataType = 5
	ncclFloat16  ncclDataType = 6
	ncclFloat32  ncclDataType = 7
	ncclFloat64  ncclDataType = 8
	ncclBfloat16 ncclDataType = 9
)

// ncclRedOp_t.
const (
	ncclSum  ncclRedOp = 0
	ncclProd ncclRedOp = 1
	ncclMax  ncclRedOp = 2
	ncclMin  ncclRedOp = 3
	ncclAvg  ncclRedOp = 4
)

const (
	ncclAPIMagic      = 0xcafebeef // NCCL_API_MAGIC
	ncclConfigUndef   = -1 << 31   // NCCL_CONFIG_UNDEF_INT (INT_MIN)
	ncclSplitNoColor  = -1         // NCCL_SPLIT_NOCOLOR
	minVersionCode    = 22300      // ncclCommInitRankScalable appeared in 2.23.0
	configVersionCode = 22300      // the ncclConfig_t layout filled below is 2.23's
)

// ncclConfig is ncclConfig_t as NCCL 2.23 lays it out (the oldest release
// with ncclCommInitRankScalable): nccl.h.in at v2.23.4-1 (struct
// ncclConfig_v21700) ends at splitShare; trafficClass came in 2.26,
// commName … nvlsCTAs in 2.27, later fields after. NCCL's parseCommConfig
// (init.cc) copies min(size, its own sizeof) bytes over its
// NCCL_CONFIG_INITIALIZER and resets every field newer than the version
// field to its default, so every later release accepts this config with
// the fields it added left unset.
type ncclConfig struct {
	size           uintptr
	magic          uint32
	version        uint32
	blocking       int32
	cgaClusterSize int32
	minCTAs        int32
	maxCTAs        int32
	netName        unsafe.Pointer
	splitShare     int32
}

// newConfig returns a config with every field unset but blocking.
func newConfig(blocking bool) ncclConfig {
	u := int32(ncclConfigUndef)
	c := ncclConfig{
		size: unsafe.Sizeof(ncclConfig{}), magic: ncclAPIMagic, version: configVersionCode,
		cgaClusterSize: u, minCTAs: u, maxCTAs: u, splitShare: u,
	}
	c.blocking = 0
	if blocking {
		c.blocking = 1
	}
	return c
}

// CUresult codes this package tells apart (cuda.h).
const (
	cudaSuccess             cuResult = 0   // CUDA_SUCCESS
	cudaErrorInvalidValue   cuResult = 1   // CUDA_ERROR_INVALID_VALUE
	cudaErrorOutOfMemory    cuResult = 2   // CUDA_ERROR_OUT_OF_MEMORY
	cudaErrorNotInitialized cuResult = 3   // CUDA_ERROR_NOT_INITIALIZED
	cudaErrorNoDevice       cuResult = 100 // CUDA_ERROR_NO_DEVICE
	cudaErrorInvalidDevice  cuResult = 101 // CUDA_ERROR_INVALID_DEVICE
	cudaErrorInvalidContext cuResult = 201 // CUDA_ERROR_INVALID_CONTEXT
	cudaErrorNotReady       cuResult = 600 // CUDA_ERROR_NOT_READY
	cudaErrorIllegalAddress cuResult = 700 // CUDA_ERROR_ILLEGAL_ADDRESS
	cuStreamNonBlocking              = 0x1 // CU_STREAM_NON_BLOCKING
	cuEventDisableTiming             = 0x2 // CU_EVENT_DISABLE_TIMING
	cuMemHostAllocPortable           = 0x1 // CU_MEMHOSTALLOC_PORTABLE
)
