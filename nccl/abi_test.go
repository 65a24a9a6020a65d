package nccl

import (
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// The ABI of abi.go against the published headers, row by row: each value
// is transcribed from the header line quoted beside it, so a change to
// abi.go that drifts from NVIDIA's headers fails here. The headers read:
const (
	// The oldest NCCL this package supports (the first 2.23 release).
	ncclH223 = "NVIDIA/nccl src/nccl.h.in @ v2.23.4-1 (68b54236)"
	// The first with the fp8 types.
	ncclH224 = "NVIDIA/nccl src/nccl.h.in @ v2.24.3-1"
	// What 2.23 lacks and later releases add (ncclTimeout, NCCL_API_MAGIC).
	ncclH230 = "NVIDIA/nccl src/nccl.h.in @ v2.30.7-1 (73cf1122)"
	// CUDA's driver API header; these values have not changed since CUDA 4.
	cudaH = "cuda.h, CUDA 12.6.3 (CUDA_VERSION 12060)"
)

func TestABIConstants(t *testing.T) {
	tests := []struct {
		name   string
		got    int64 // abi.go's value
		want   int64 // the header's
		header string
		line   string // file:line and the line's text
	}{
		{"ncclSuccess", int64(ncclSuccess), 0, ncclH223, "37: typedef enum { ncclSuccess                 =  0,"},
		{"ncclUnhandledCudaError", int64(ncclUnhandledCudaError), 1, ncclH223, "38: ncclUnhandledCudaError      =  1,"},
		{"ncclSystemError", int64(ncclSystemError), 2, ncclH223, "39: ncclSystemError             =  2,"},
		{"ncclInternalError", int64(ncclInternalError), 3, ncclH223, "40: ncclInternalError           =  3,"},
		{"ncclInvalidArgument", int64(ncclInvalidArgument), 4, ncclH223, "41: ncclInvalidArgument         =  4,"},
		{"ncclInvalidUsage", int64(ncclInvalidUsage), 5, ncclH223, "42: ncclInvalidUsage            =  5,"},
		{"ncclRemoteError", int64(ncclRemoteError), 6, ncclH223, "43: ncclRemoteError             =  6,"},
		{"ncclInProgress", int64(ncclInProgress), 7, ncclH223, "44: ncclInProgress              =  7,"},
		// 2.23–2.29 have ncclNumResults = 8 here (never returned); 2.30 added ncclTimeout.
		{"ncclTimeout", int64(ncclTimeout), 8, ncclH230, "52: ncclTimeout                 =  8,"},

		{"ncclInt8", int64(ncclInt8), 0, ncclH223, "230: typedef enum { ncclInt8       = 0, ncclChar       = 0,"},
		{"ncclUint8", int64(ncclUint8), 1, ncclH223, "231: ncclUint8      = 1,"},
		{"ncclInt32", int64(ncclInt32), 2, ncclH223, "232: ncclInt32      = 2, ncclInt        = 2,"},
		{"ncclUint32", int64(ncclUint32), 3, ncclH223, "233: ncclUint32     = 3,"},
		{"ncclInt64", int64(ncclInt64), 4, ncclH223, "234: ncclInt64      = 4,"},
		{"ncclUint64", int64(ncclUint64), 5, ncclH223, "235: ncclUint64     = 5,"},
		{"ncclFloat16", int64(ncclFloat16), 6, ncclH223, "236: ncclFloat16    = 6, ncclHalf       = 6,"},
		{"ncclFloat32", int64(ncclFloat32), 7, ncclH223, "237: ncclFloat32    = 7, ncclFloat      = 7,"},
		{"ncclFloat64", int64(ncclFloat64), 8, ncclH223, "238: ncclFloat64    = 8, ncclDouble     = 8,"},
		{"ncclBfloat16", int64(ncclBfloat16), 9, ncclH223, "240: ncclBfloat16   = 9,"},
		{"ncclFloat8e4m3", int64(ncclFloat8e4m3), 10, ncclH224, "247: ncclFloat8e4m3 = 10,"},
		{"ncclFloat8e5m2", int64(ncclFloat8e5m2), 11, ncclH224, "248: ncclFloat8e5m2 = 11,"},
		{"fp8VersionCode", fp8VersionCode, 2*10000 + 24*100 + 3, ncclH224, "247: ncclFloat8e4m3 = 10, (absent from 2.23.4's header)"},

		{"ncclSum", int64(ncclSum), 0, ncclH223, "212: typedef enum { ncclSum        = 0,"},
		{"ncclProd", int64(ncclProd), 1, ncclH223, "213: ncclProd       = 1,"},
		{"ncclMax", int64(ncclMax), 2, ncclH223, "214: ncclMax        = 2,"},
		{"ncclMin", int64(ncclMin), 3, ncclH223, "215: ncclMin        = 3,"},
		{"ncclAvg", int64(ncclAvg), 4, ncclH223, "216: ncclAvg        = 4,"},
		{"ncclNumOps", int64(ncclNumOps), 5, ncclH223, "220: ncclNumOps     = 5,"},
		{"ncclScalarHostImmediate", int64(ncclScalarHostImmediate), 1, ncclH223, "255: ncclScalarHostImmediate = 1"},

		// 2.23 writes the magic as a literal in NCCL_CONFIG_INITIALIZER; later headers name it.
		{"ncclAPIMagic (2.23)", ncclAPIMagic, 0xcafebeef, ncclH223, "72: 0xcafebeef,           /* magic */"},
		{"ncclAPIMagic", ncclAPIMagic, 0xcafebeef, ncclH230, "61: #define NCCL_API_MAGIC 0xcafebeef"},
		{"ncclConfigUndef", ncclConfigUndef, -1 << 31, ncclH223, "47: #define NCCL_CONFIG_UNDEF_INT INT_MIN"},
		{"ncclSplitNoColor", ncclSplitNoColor, -1, ncclH223, "49: #define NCCL_SPLIT_NOCOLOR -1"},
		{"uniqueIDBytes", uniqueIDBytes, 128, ncclH223, "33: #define NCCL_UNIQUE_ID_BYTES 128"},
		{"sizeof(uniqueID)", int64(unsafe.Sizeof(uniqueID{})), 128, ncclH223,
			"34: typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;"},
		// NCCL_VERSION(2,23,0) = 2*10000 + 23*100 + 0; 2.22.3's header has no ncclCommInitRankScalable.
		{"minVersionCode", minVersionCode, 2*10000 + 23*100 + 0, ncclH223,
			"175: ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config);"},
		{"configVersionCode", configVersionCode, 2*10000 + 23*100 + 0, ncclH223,
			"54: typedef struct ncclConfig_v21700 { (the 2.23 layout; see TestConfigLayout)"},

		{"cudaSuccess", int64(cudaSuccess), 0, cudaH, "2348: CUDA_SUCCESS                              = 0,"},
		{"cudaErrorInvalidValue", int64(cudaErrorInvalidValue), 1, cudaH, "2354: CUDA_ERROR_INVALID_VALUE                  = 1,"},
		{"cudaErrorOutOfMemory", int64(cudaErrorOutOfMemory), 2, cudaH, "2360: CUDA_ERROR_OUT_OF_MEMORY                  = 2,"},
		{"cudaErrorNotInitialized", int64(cudaErrorNotInitialized), 3, cudaH, "2366: CUDA_ERROR_NOT_INITIALIZED                = 3,"},
		{"cudaErrorNoDevice", int64(cudaErrorNoDevice), 100, cudaH, "2420: CUDA_ERROR_NO_DEVICE                      = 100,"},
		{"cudaErrorInvalidDevice", int64(cudaErrorInvalidDevice), 101, cudaH, "2427: CUDA_ERROR_INVALID_DEVICE                 = 101,"},
		{"cudaErrorInvalidContext", int64(cudaErrorInvalidContext), 201, cudaH, "2450: CUDA_ERROR_INVALID_CONTEXT                = 201,"},
		{"cudaErrorNotReady", int64(cudaErrorNotReady), 600, cudaH, "2640: CUDA_ERROR_NOT_READY                      = 600,"},
		{"cudaErrorIllegalAddress", int64(cudaErrorIllegalAddress), 700, cudaH, "2649: CUDA_ERROR_ILLEGAL_ADDRESS                = 700,"},
		{"cuStreamNonBlocking", cuStreamNonBlocking, 0x1, cudaH, "416: CU_STREAM_NON_BLOCKING        = 0x1"},
		{"cuEventDisableTiming", cuEventDisableTiming, 0x2, cudaH, "445: CU_EVENT_DISABLE_TIMING = 0x2,"},
		{"cuMemHostAllocPortable", cuMemHostAllocPortable, 0x1, cudaH, "3010: #define CU_MEMHOSTALLOC_PORTABLE        0x01"},
		// The line is not checked against 12.6.3; every CUDA 12 cuda.h has these values.
		{"attrComputeCapabilityMajor", attrComputeCapabilityMajor, 75, cudaH, "CUdevice_attribute: CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,"},
		{"attrComputeCapabilityMinor", attrComputeCapabilityMinor, 76, cudaH, "CUdevice_attribute: CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %d (%#x), want %d (%#x) from %s line %s", tt.name, tt.got, tt.got, tt.want, tt.want, tt.header, tt.line)
		}
	}
}

// ncclConfig223 is ncclConfig_t of nccl.h.in at v2.23.4-1, lines 54–66,
// field by field with its C type (ncclConfig_v21700 with splitShare, as
// 2.18 through 2.25 declare it).
var ncclConfig223 = []struct{ ctype, name string }{
	{"size_t", "size"},          // 56:   size_t size;
	{"unsigned int", "magic"},   // 57:   unsigned int magic;
	{"unsigned int", "version"}, // 58:   unsigned int version;
	{"int", "blocking"},         // 60:   int blocking;
	{"int", "cgaClusterSize"},   // 61:   int cgaClusterSize;
	{"int", "minCTAs"},          // 62:   int minCTAs;
	{"int", "maxCTAs"},          // 63:   int maxCTAs;
	{"const char *", "netName"}, // 64:   const char *netName;
	{"int", "splitShare"},       // 65:   int splitShare;
}

// TestConfigLayout holds ncclConfig against ncclConfig_t as 2.23 declares
// it, laid out by the x86-64 System V rules (each field at the next
// multiple of its alignment, the size rounded up to the largest), and
// against the offsets written out by hand for amd64.
func TestConfigLayout(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layouts below are for 64-bit hosts, the only ones CUDA supports")
	}
	cSize := map[string]uintptr{"size_t": 8, "unsigned int": 4, "int": 4, "const char *": 8}
	goKind := map[string]reflect.Kind{"size_t": reflect.Uintptr, "unsigned int": reflect.Uint32, "int": reflect.Int32, "const char *": reflect.UnsafePointer}

	typ := reflect.TypeFor[ncclConfig]()
	if typ.NumField() != len(ncclConfig223) {
		t.Fatalf("ncclConfig has %d fields, ncclConfig_t of NCCL 2.23 has %d (%s lines 54-66)", typ.NumField(), len(ncclConfig223), ncclH223)
	}
	var off, align uintptr
	for i, c := range ncclConfig223 {
		sz := cSize[c.ctype]
		off = (off + sz - 1) / sz * sz
		align = max(align, sz)
		f := typ.Field(i)
		if !strings.EqualFold(f.Name, c.name) || f.Type.Kind() != goKind[c.ctype] || f.Offset != off {
			t.Errorf("field %d: Go %s %s at offset %d, C %s %s at offset %d", i, f.Name, f.Type, f.Offset, c.ctype, c.name, off)
		}
		off += sz
	}
	cTotal := (off + align - 1) / align * align
	if got := unsafe.Sizeof(ncclConfig{}); got != cTotal || cTotal != 48 {
		t.Errorf("sizeof(ncclConfig) = %d, C's sizeof(ncclConfig_t) = %d, want both 48", got, cTotal)
	}

	var c ncclConfig
	for _, tt := range []struct {
		field string
		got   uintptr
		want  uintptr
	}{
		{"size", unsafe.Offsetof(c.Size), 0},
		{"magic", unsafe.Offsetof(c.Magic), 8},
		{"version", unsafe.Offsetof(c.Version), 12},
		{"blocking", unsafe.Offsetof(c.Blocking), 16},
		{"cgaClusterSize", unsafe.Offsetof(c.CGAClusterSize), 20},
		{"minCTAs", unsafe.Offsetof(c.MinCTAs), 24},
		{"maxCTAs", unsafe.Offsetof(c.MaxCTAs), 28},
		{"netName", unsafe.Offsetof(c.NetName), 32},
		{"splitShare", unsafe.Offsetof(c.SplitShare), 40},
	} {
		if tt.got != tt.want {
			t.Errorf("offsetof(ncclConfig.%s) = %d, want %d", tt.field, tt.got, tt.want)
		}
	}
}

// TestNewConfig: the config handed to NCCL says its own size and 2.23's
// version, carries the magic, and leaves every field but blocking unset
// (NCCL_CONFIG_INITIALIZER's values), so NCCL picks its defaults.
func TestNewConfig(t *testing.T) {
	for _, blocking := range []bool{false, true} {
		c := newConfig(blocking)
		want := ncclConfig{
			Size: 48, Magic: 0xcafebeef, Version: 22300,
			CGAClusterSize: -1 << 31, MinCTAs: -1 << 31, MaxCTAs: -1 << 31, NetName: nil, SplitShare: -1 << 31,
		}
		if blocking {
			want.Blocking = 1
		}
		if c != want {
			t.Errorf("newConfig(%v) = %+v, want %+v", blocking, c, want)
		}
	}
}
