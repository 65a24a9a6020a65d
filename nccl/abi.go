package nccl

import "github.com/hiercomm/hiercomm/nccl/internal/cuapi"

// The function table (the CUDA driver and NCCL entry points this package
// calls) and the ABI it shares with the libraries live in
// nccl/internal/cuapi, the seam that the real libraries (real.go) and the
// fake (nccl/ncclfake) implement. The names below are this package's
// names for them; abi_test.go holds the ABI against NVIDIA's headers.

type (
	cuResult     = cuapi.CUResult
	ncclResult   = cuapi.NCCLResult
	cuDevice     = cuapi.Device
	cuContext    = cuapi.Context
	cuStream     = cuapi.Stream
	cuEvent      = cuapi.Event
	ncclComm     = cuapi.Comm
	ncclDataType = cuapi.DataType
	ncclRedOp    = cuapi.RedOp
	uniqueID     = cuapi.UniqueID
	ncclConfig   = cuapi.Config
	driverAPI    = cuapi.Driver
	ncclAPI      = cuapi.NCCL
)

const (
	ncclSuccess             = cuapi.NCCLSuccess
	ncclUnhandledCudaError  = cuapi.NCCLUnhandledCudaError
	ncclSystemError         = cuapi.NCCLSystemError
	ncclInternalError       = cuapi.NCCLInternalError
	ncclInvalidArgument     = cuapi.NCCLInvalidArgument
	ncclInvalidUsage        = cuapi.NCCLInvalidUsage
	ncclRemoteError         = cuapi.NCCLRemoteError
	ncclInProgress          = cuapi.NCCLInProgress
	ncclTimeout             = cuapi.NCCLTimeout
	ncclInt8                = cuapi.NCCLInt8
	ncclUint8               = cuapi.NCCLUint8
	ncclInt32               = cuapi.NCCLInt32
	ncclUint32              = cuapi.NCCLUint32
	ncclInt64               = cuapi.NCCLInt64
	ncclUint64              = cuapi.NCCLUint64
	ncclFloat16             = cuapi.NCCLFloat16
	ncclFloat32             = cuapi.NCCLFloat32
	ncclFloat64             = cuapi.NCCLFloat64
	ncclBfloat16            = cuapi.NCCLBfloat16
	ncclFloat8e4m3          = cuapi.NCCLFloat8e4m3
	ncclFloat8e5m2          = cuapi.NCCLFloat8e5m2
	ncclScalarHostImmediate = cuapi.ScalarHostImmediate
	ncclNumOps              = cuapi.NCCLNumOps
	fp8VersionCode          = cuapi.FP8VersionCode
	ncclSum                 = cuapi.NCCLSum
	ncclProd                = cuapi.NCCLProd
	ncclMax                 = cuapi.NCCLMax
	ncclMin                 = cuapi.NCCLMin
	ncclAvg                 = cuapi.NCCLAvg
	ncclAPIMagic            = cuapi.APIMagic
	ncclConfigUndef         = cuapi.ConfigUndef
	ncclSplitNoColor        = cuapi.SplitNoColor
	minVersionCode          = cuapi.MinVersionCode
	configVersionCode       = cuapi.ConfigVersionCode
	uniqueIDBytes           = cuapi.UniqueIDBytes
	cudaSuccess             = cuapi.CUDASuccess
	cudaErrorInvalidValue   = cuapi.CUDAErrorInvalidValue
	cudaErrorOutOfMemory    = cuapi.CUDAErrorOutOfMemory
	cudaErrorNotInitialized = cuapi.CUDAErrorNotInitialized
	cudaErrorNoDevice       = cuapi.CUDAErrorNoDevice
	cudaErrorInvalidDevice  = cuapi.CUDAErrorInvalidDevice
	cudaErrorInvalidContext = cuapi.CUDAErrorInvalidContext
	cudaErrorNotReady       = cuapi.CUDAErrorNotReady
	cudaErrorIllegalAddress = cuapi.CUDAErrorIllegalAddress
	cuStreamNonBlocking     = cuapi.StreamNonBlocking
	cuEventDisableTiming    = cuapi.EventDisableTiming
	cuMemHostAllocPortable  = cuapi.MemHostAllocPortable

	attrComputeCapabilityMajor = cuapi.AttrComputeCapabilityMajor
	attrComputeCapabilityMinor = cuapi.AttrComputeCapabilityMinor
)

// newConfig returns a config with every field unset but blocking.
func newConfig(blocking bool) ncclConfig { return cuapi.NewConfig(blocking) }

// ncclVersionString spells an NCCL version code (cuapi.VersionString).
func ncclVersionString(code int) string { return cuapi.VersionString(code) }
