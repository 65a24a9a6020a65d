package nccl

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The loader and the real function table against real libraries: NVIDIA's
// CUDA driver library (Debian's libcuda1, fetched by .ci/fetch-libcuda; no
// GPU needed to load it, and cuInit then says there is no device), and
// stand-in NCCLs compiled from C here, which check that every argument of
// every NCCL call arrives in its C parameter.

// testLibcuda is the path of a real libcuda.so.1: $HIERCOMM_TEST_LIBCUDA
// (make test sets it from .ci/fetch-libcuda), else what .ci/fetch-libcuda
// prints (at once from its cache, else fetched from Debian's mirrors). It
// skips the test only when none can be had, saying why.
func testLibcuda(t *testing.T) string {
	t.Helper()
	pinDefault()
	if p := os.Getenv("HIERCOMM_TEST_LIBCUDA"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("HIERCOMM_TEST_LIBCUDA names no file: %v", err)
		}
		return p
	}
	path, err := fetchLibcuda()
	if err != nil {
		t.Skipf("no libcuda.so.1 to test the loader against (set HIERCOMM_TEST_LIBCUDA, or let ../.ci/fetch-libcuda reach Debian's mirrors): %v", err)
	}
	return path
}

// pinDefault has Default load what this machine has before a test loads
// Debian's libcuda.so.1 into the process: once loaded, the dynamic loader
// would hand that one to Default's dlopen("libcuda.so.1"), and Available
// (which the TestGPU* tests skip by) would report on it instead.
func pinDefault() { _, _ = Default() }

// fetchLibcuda runs ../.ci/fetch-libcuda once per test process.
var fetchLibcuda = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join("..", ".ci", "fetch-libcuda"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", errors.New(cmd.String() + ": " + err.Error() + ": " + strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
})

// hasGPU says whether NVIDIA's kernel driver is loaded here, in which case
// the no-device checks below do not hold.
func hasGPU() bool {
	_, err := os.Stat("/proc/driver/nvidia/version")
	return err == nil
}

// undoDeviceNodes leaves /dev as the test found it. NVIDIA's libcuda, run
// as root on a machine without its kernel driver, creates /dev/nvidiactl
// in cuInit (as nvidia-modprobe would); a test that may call cuInit
// removes the device nodes that appeared while it ran.
func undoDeviceNodes(t *testing.T) {
	if hasGPU() {
		return
	}
	before, _ := filepath.Glob("/dev/nvidia*")
	t.Cleanup(func() {
		after, _ := filepath.Glob("/dev/nvidia*")
		for _, f := range after {
			if fi, err := os.Lstat(f); err == nil && fi.Mode()&os.ModeCharDevice != 0 && !slices.Contains(before, f) {
				if err := os.Remove(f); err != nil {
					t.Logf("cuInit created %s, which could not be removed: %v", f, err)
				}
			}
		}
	})
}

// driverSymbols is every CUDA driver entry point this package calls, by
// its C name (cuda.h maps the plain names of the _v2 ones to them).
var driverSymbols = []string{
	"cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName", "cuDeviceGetAttribute",
	"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2", "cuCtxSetCurrent",
	"cuMemAlloc_v2", "cuMemFree_v2", "cuMemHostAlloc", "cuMemFreeHost",
	"cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
	"cuMemcpyDtoDAsync_v2", "cuMemsetD8Async", "cuStreamCreate", "cuStreamDestroy_v2",
	"cuStreamSynchronize", "cuStreamWaitEvent", "cuEventCreate", "cuEventRecord",
	"cuEventQuery", "cuEventDestroy_v2", "cuGetErrorName", "cuGetErrorString",
}

// ncclSymbols is every NCCL entry point this package calls.
var ncclSymbols = []string{
	"ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRankScalable", "ncclCommSplit",
	"ncclCommFinalize", "ncclCommDestroy", "ncclCommAbort", "ncclCommGetAsyncError",
	"ncclGetErrorString", "ncclGetLastError", "ncclAllReduce", "ncclBroadcast", "ncclReduce",
	"ncclAllGather", "ncclReduceScatter", "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd",
	"ncclRedOpCreatePreMulSum", "ncclRedOpDestroy",
}

// symbolNames lists syms' C names, checking that each binds a distinct
// function variable.
func symbolNames(t *testing.T, syms []cSymbol) []string {
	t.Helper()
	var names []string
	seen := map[any]bool{}
	for _, s := range syms {
		names = append(names, s.name)
		if reflect.TypeOf(s.fn).Elem().Kind() != reflect.Func || seen[s.fn] {
			t.Errorf("symbol %s binds %T, want a func variable of its own", s.name, s.fn)
		}
		seen[s.fn] = true
	}
	return names
}

// assertAllBound fails for each func field of the struct at p left nil.
func assertAllBound(t *testing.T, p any) {
	t.Helper()
	v := reflect.ValueOf(p).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Func && f.IsNil() {
			t.Errorf("%s.%s is not bound", v.Type().Name(), v.Type().Field(i).Name)
		}
	}
}

func TestSymbolTables(t *testing.T) {
	if got := symbolNames(t, (&realDriver{}).symbols()); !reflect.DeepEqual(got, driverSymbols) {
		t.Errorf("driver symbols:\n got %q\nwant %q", got, driverSymbols)
	}
	if got := symbolNames(t, (&realNCCL{}).symbols()); !reflect.DeepEqual(got, ncclSymbols) {
		t.Errorf("NCCL symbols:\n got %q\nwant %q", got, ncclSymbols)
	}
	if n := reflect.TypeFor[realDriver]().NumField(); n != len(driverSymbols) {
		t.Errorf("realDriver has %d fields for %d symbols", n, len(driverSymbols))
	}
	if n := reflect.TypeFor[realNCCL]().NumField(); n != len(ncclSymbols) {
		t.Errorf("realNCCL has %d fields for %d symbols", n, len(ncclSymbols))
	}
}

func TestRealDriverLibrary(t *testing.T) {
	undoDeviceNodes(t)
	path := testLibcuda(t)

	// The resolver itself: every driver entry point is in NVIDIA's library.
	handle, err := dlopen(path)
	if err != nil {
		t.Fatalf("dlopen(%s): %v", path, err)
	}
	d := &realDriver{}
	if err := bindSymbols(handle, path, d.symbols()); err != nil {
		t.Fatalf("binding the driver: %v", err)
	}
	assertAllBound(t, d)

	lib, err := LoadDriver(path)
	if err != nil {
		t.Fatalf("LoadDriver(%s): %v", path, err)
	}
	t.Logf("loaded %v: cuDriverGetVersion = %d", lib, lib.DriverVersion())
	if v := lib.DriverVersion(); v < 12000 || v%10 != 0 {
		t.Errorf("DriverVersion() = %d, want a CUDA 12 or later code (1000·major + 10·minor; Debian bookworm's 535: 12020)", v)
	}
	if !strings.Contains(lib.String(), "libcuda.so") || !strings.Contains(lib.String(), "(driver ") {
		t.Errorf("String() = %q, want the file loaded and its driver version", lib.String())
	}

	// The driver's own words, through cuGetErrorName and cuGetErrorString.
	for _, tt := range []struct {
		r    cuResult
		want string
	}{
		{cudaSuccess, "CUDA_SUCCESS: no error"},
		{cudaErrorNoDevice, "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected"},
		{cudaErrorNotReady, "CUDA_ERROR_NOT_READY: device not ready"},
		{cuResult(123456), ""}, // a code the driver does not know
	} {
		if got := lib.drv.ErrorString(tt.r); got != tt.want {
			t.Errorf("ErrorString(%d) = %q, want %q", tt.r, got, tt.want)
		}
	}

	if hasGPU() {
		t.Skip("NVIDIA's kernel driver is loaded here: the no-device checks below do not apply")
	}
	// No GPU: cuInit says so, with code 100, and so do the callers of it.
	if r := lib.drv.Init(0); r != cudaErrorNoDevice {
		t.Fatalf("cuInit(0) = %d (%s), want %d (CUDA_ERROR_NO_DEVICE) on a machine without a GPU", r, lib.drv.ErrorString(r), cudaErrorNoDevice)
	}
	var n int32 = -1
	if r := lib.drv.DeviceGetCount(&n); r == cudaSuccess {
		t.Errorf("cuDeviceGetCount after a failed cuInit succeeded (count %d)", n)
	}
	var p uintptr
	if r := lib.drv.MemAlloc(&p, 4096); r == cudaSuccess || p != 0 {
		t.Errorf("cuMemAlloc_v2 without a device = %d, %#x; want a failure", r, p)
	}
	const reason = "no CUDA-capable device is detected"
	_, err = lib.DeviceCount()
	var cuErr *CUDAError
	if err == nil || !strings.Contains(err.Error(), reason) || !errors.Is(err, ErrUnavailable) ||
		!errors.As(err, &cuErr) || cuErr.Code != int(cudaErrorNoDevice) {
		t.Errorf("DeviceCount() error = %v, want ErrUnavailable and a CUDAError with code 100 saying %q", err, reason)
	}
	_, err = Load(LoadOptions{CUDAPath: path})
	if err == nil || !strings.Contains(err.Error(), "cuInit(0)") || !strings.Contains(err.Error(), reason) ||
		!strings.Contains(err.Error(), "CUDA_ERROR_NO_DEVICE") || !errors.Is(err, ErrUnavailable) {
		t.Errorf("Load(CUDAPath: %s) error = %v, want cuInit(0)'s CUDA_ERROR_NO_DEVICE: %s", path, err, reason)
	}
	t.Logf("Load without a GPU: %v", err)
}

func TestLoadErrors(t *testing.T) {
	undoDeviceNodes(t)
	pinDefault()
	const missing = "/nonexistent/hiercomm-test/lib.so.1"
	check := func(what string, err error, want ...string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s succeeded, want an error saying %q", what, want)
			return
		}
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: error %q does not wrap ErrUnavailable", what, err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", what, err, w)
			}
		}
		t.Logf("%s: %v", what, err)
	}

	_, err := LoadDriver(missing)
	check("LoadDriver(missing file)", err, missing, "cannot open shared object file")
	_, err = Load(LoadOptions{CUDAPath: missing})
	check("Load(CUDAPath: missing file)", err, missing, "cannot open shared object file")
	_, err = LoadDriver("libc.so.6")
	check("LoadDriver(libc.so.6)", err, "libc.so.6", "not a usable CUDA driver library", "none of the 29", "cuInit", "undefined symbol")

	_, err = openNCCL(missing, nil)
	check("NCCLPath: missing file", err, missing, "cannot open shared object file")
	_, err = openNCCL("libc.so.6", nil)
	check("NCCLPath: libc.so.6", err, "libc.so.6", "not NCCL", "lacks ncclGetVersion", "undefined symbol: ncclGetVersion")
	if libcuda, err := fetchLibcuda(); err == nil {
		_, err = openNCCL(libcuda, nil)
		check("NCCLPath: libcuda.so.1", err, libcuda, "not NCCL", "lacks ncclGetVersion")
	}

	// The search names every place it looked. (Skipped where the system
	// loader finds a real NCCL: the search then ends there.)
	if _, err := openNCCLFile(ncclSoname); err == nil {
		t.Logf("the system loader has an NCCL; the search's errors are not tested")
	} else {
		empty := t.TempDir()
		_, err = openNCCL("", []string{empty})
		check("search, no wheel", err, "libnccl.so.2 via the system loader", "cannot open shared object file", "Python wheel", empty, "none there")

		prefix := t.TempDir()
		wheel := filepath.Join(prefix, "lib", "python3.12", "site-packages", "nvidia", "nccl", "lib", "libnccl.so.2")
		if err := os.MkdirAll(filepath.Dir(wheel), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(wheel, []byte("not an ELF file"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err = openNCCL("", []string{empty, prefix})
		check("search, broken wheel", err, "libnccl.so.2 via the system loader", wheel, "HIERCOMM_NCCL_LIBRARY")
	}

	// Available says why not, readably; or, on a GPU host, agrees with Default.
	if err := Available(); err != nil {
		check("Available()", err, "nccl: GPU tier unavailable: ")
	} else {
		lib, err := Default()
		if err != nil {
			t.Fatalf("Available() = nil but Default() = %v", err)
		}
		if n, err := lib.DeviceCount(); err != nil || n < 1 {
			t.Errorf("Available() = nil but DeviceCount() = %d, %v", n, err)
		}
		t.Logf("a GPU is usable here: %v", lib)
	}
}

func TestNCCLVersionString(t *testing.T) {
	for code, want := range map[int]string{
		minVersionCode: "2.23.0", 22304: "2.23.4", 22803: "2.28.3", 23007: "2.30.7", 21903: "2.19.3",
		2804: "2.8.4", // before 2.9: 1000·major + 100·minor + patch
	} {
		if got := ncclVersionString(code); got != want {
			t.Errorf("ncclVersionString(%d) = %q, want %q", code, got, want)
		}
	}
}

func TestNCCLWheelFiles(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	mk := func(prefix, pyDir, pkgs string) string {
		f := filepath.Join(prefix, "lib", pyDir, pkgs, "nvidia", "nccl", "lib", "libnccl.so.2")
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	a11 := mk(a, "python3.11", "site-packages")
	a12 := mk(a, "python3.12", "site-packages")
	b11 := mk(b, "python3.11", "dist-packages")
	mk(b, "python2.7", "site-packages") // not Python 3: never NCCL's wheel
	got := ncclWheelFiles([]string{a, b, a})
	want := []string{a11, a12, b11}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ncclWheelFiles = %q, want %q", got, want)
	}
}

// stubNCCL is a stand-in libnccl.so.2: every entry point this package
// binds, each checking that the arguments TestNCCLCalls passes arrive in
// their C parameters (returning 100 + the 1-based position of the first
// that does not), so a Go signature that disagrees with nccl.h fails.
// Built with -DVERSION=code; -DONLY_VERSION leaves out all but
// ncclGetVersion.
const stubNCCL = `
#include <limits.h>
#include <stddef.h>
typedef int ncclResult_t;
typedef struct ncclComm* ncclComm_t;
typedef void* cudaStream_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct {
  size_t size; unsigned int magic; unsigned int version;
  int blocking; int cgaClusterSize; int minCTAs; int maxCTAs; const char *netName; int splitShare;
} ncclConfig_t;
#define CHECK(i, cond) if (!(cond)) return 100 + (i)
#define COMM ((ncclComm_t)0x1234)
#define STREAM ((cudaStream_t)0x9999)
#define SEND ((const void*)0x1000)
#define RECV ((void*)0x2000)
#define COUNT ((size_t)0x100000001ULL)

ncclResult_t ncclGetVersion(int *v) { *v = VERSION; return 0; }

#ifndef ONLY_VERSION
static int groups;
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  for (int i = 0; i < 128; i++) id->internal[i] = (char)i;
  return 0;
}
ncclResult_t ncclCommInitRankScalable(ncclComm_t *comm, int nranks, int rank, int nId, ncclUniqueId *ids, ncclConfig_t *config) {
  CHECK(2, nranks == 5); CHECK(3, rank == 3); CHECK(4, nId == 2);
  CHECK(5, ids[0].internal[127] == 127 && ids[1].internal[0] == 7);
  CHECK(6, config->size == 48 && config->magic == 0xcafebeef && config->version == 22300 &&
    config->blocking == 0 && config->cgaClusterSize == INT_MIN && config->minCTAs == INT_MIN &&
    config->maxCTAs == INT_MIN && config->netName == NULL && config->splitShare == INT_MIN);
  *comm = COMM;
  return 0;
}
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
  CHECK(1, comm == COMM); CHECK(2, color == -1); CHECK(3, key == 9); CHECK(5, config == NULL);
  *newcomm = (ncclComm_t)0x5678;
  return 0;
}
ncclResult_t ncclCommFinalize(ncclComm_t comm) { CHECK(1, comm == COMM); return 0; }
ncclResult_t ncclCommDestroy(ncclComm_t comm) { CHECK(1, comm == COMM); return 0; }
ncclResult_t ncclCommAbort(ncclComm_t comm) { CHECK(1, comm == COMM); return 0; }
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *r) { CHECK(1, comm == COMM); *r = 7; return 0; }
const char *ncclGetErrorString(ncclResult_t r) { return r == 5 ? "invalid usage" : "unexpected code"; }
const char *ncclGetLastError(ncclComm_t comm) { return comm == NULL ? "last error of the thread" : "last error of the comm"; }
ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, ncclComm_t c, cudaStream_t st) {
  CHECK(1, s == SEND); CHECK(2, r == RECV); CHECK(3, n == COUNT); CHECK(4, dt == 9); CHECK(5, op == 4);
  CHECK(6, c == COMM); CHECK(7, st == STREAM); return 0;
}
ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, ncclComm_t c, cudaStream_t st) {
  CHECK(1, s == SEND); CHECK(2, r == RECV); CHECK(3, n == COUNT); CHECK(4, dt == 7); CHECK(5, root == 2);
  CHECK(6, c == COMM); CHECK(7, st == STREAM); return 0;
}
ncclResult_t ncclReduce(const void *s, void *r, size_t n, int dt, int op, int root, ncclComm_t c, cudaStream_t st) {
  CHECK(1, s == SEND); CHECK(2, r == RECV); CHECK(3, n == COUNT); CHECK(4, dt == 8); CHECK(5, op == 2);
  CHECK(6, root == 4); CHECK(7, c == COMM); CHECK(8, st == STREAM); return 0;
}
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, int dt, ncclComm_t c, cudaStream_t st) {
  CHECK(1, s == SEND); CHECK(2, r == RECV); CHECK(3, n == COUNT); CHECK(4, dt == 4);
  CHECK(5, c == COMM); CHECK(6, st == STREAM); return 0;
}
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, ncclComm_t c, cudaStream_t st) {
  CHECK(1, s == SEND); CHECK(2, r == RECV); CHECK(3, n == COUNT); CHECK(4, dt == 6); CHECK(5, op == 3);
  CHECK(6, c == COMM); CHECK(7, st == STREAM); return 0;
}
ncclResult_t ncclSend(const void *s, size_t n, int dt, int peer, ncclComm_t c, cudaStream_t st) {
  CHECK(1, s == SEND); CHECK(2, n == COUNT); CHECK(3, dt == 0); CHECK(4, peer == 1);
  CHECK(5, c == COMM); CHECK(6, st == STREAM); return 0;
}
ncclResult_t ncclRecv(void *r, size_t n, int dt, int peer, ncclComm_t c, cudaStream_t st) {
  CHECK(1, r == RECV); CHECK(2, n == COUNT); CHECK(3, dt == 1); CHECK(4, peer == 0);
  CHECK(5, c == COMM); CHECK(6, st == STREAM); return 0;
}
ncclResult_t ncclGroupStart(void) { groups++; return 0; }
ncclResult_t ncclGroupEnd(void) { return groups-- > 0 ? 0 : 5; }
ncclResult_t ncclRedOpCreatePreMulSum(int *op, void *scalar, int dt, int residence, ncclComm_t c) {
  CHECK(2, *(const double*)scalar == -0.25); CHECK(3, dt == 8); CHECK(4, residence == 1); CHECK(5, c == COMM);
  *op = 5; return 0;
}
ncclResult_t ncclRedOpDestroy(int op, ncclComm_t c) { CHECK(1, op == 5); CHECK(2, c == COMM); return 0; }
#endif
`

// buildStubNCCL compiles stubNCCL into dir/libnccl.so.2 with the C
// compiler, skipping the test when there is none.
func buildStubNCCL(t *testing.T, dir string, flags ...string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		if cc, err = exec.LookPath("gcc"); err != nil {
			t.Skipf("no C compiler (cc, gcc) to build a stand-in libnccl.so.2: %v", err)
		}
	}
	src := filepath.Join(dir, "stub.c")
	if err := os.WriteFile(src, []byte(stubNCCL), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "libnccl.so.2")
	args := append([]string{"-shared", "-fPIC", "-o", lib, src}, flags...)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("cc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return lib
}

// TestNCCLCalls binds a stand-in NCCL and makes every call through
// ncclAPI with distinct arguments: pointers, a count above 2³², negative
// ints, an 8-argument call (two on the stack on amd64), string results.
func TestNCCLCalls(t *testing.T) {
	dir := t.TempDir()
	path := buildStubNCCL(t, dir, "-DVERSION=22803")
	nc, err := openNCCL(path, nil)
	if err != nil {
		t.Fatalf("openNCCL(%s): %v", path, err)
	}
	assertAllBound(t, nc.api)
	if want, _ := filepath.EvalSymlinks(path); nc.version != 22803 || nc.file != want {
		t.Errorf("opened NCCL %d from %q, want 22803 from %q", nc.version, nc.file, want)
	}

	const (
		send   = uintptr(0x1000)
		recv   = uintptr(0x2000)
		count  = uintptr(0x100000001)
		comm   = ncclComm(0x1234)
		stream = cuStream(0x9999)
	)
	var api ncclAPI = nc.api
	var ids [2]uniqueID
	if r := api.GetUniqueID(&ids[0]); r != ncclSuccess || ids[0][127] != 127 {
		t.Errorf("GetUniqueID = %d, id[127] = %d", r, ids[0][127])
	}
	ids[1][0] = 7
	var c, split ncclComm
	cfg := newConfig(false)
	var async ncclResult
	var op ncclRedOp
	scalar := []byte{0, 0, 0, 0, 0, 0, 0xd0, 0xbf} // -0.25, a little-endian float64
	for _, tt := range []struct {
		call string
		r    ncclResult
	}{
		{"CommInitRankScalable", api.CommInitRankScalable(&c, 5, 3, 2, &ids[0], &cfg)},
		{"CommSplit", api.CommSplit(comm, ncclSplitNoColor, 9, &split, nil)},
		{"CommGetAsyncError", api.CommGetAsyncError(comm, &async)},
		{"CommFinalize", api.CommFinalize(comm)},
		{"CommDestroy", api.CommDestroy(comm)},
		{"CommAbort", api.CommAbort(comm)},
		{"AllReduce", api.AllReduce(send, recv, count, ncclBfloat16, ncclAvg, comm, stream)},
		{"Broadcast", api.Broadcast(send, recv, count, ncclFloat32, 2, comm, stream)},
		{"Reduce", api.Reduce(send, recv, count, ncclFloat64, ncclMax, 4, comm, stream)},
		{"AllGather", api.AllGather(send, recv, count, ncclInt64, comm, stream)},
		{"ReduceScatter", api.ReduceScatter(send, recv, count, ncclFloat16, ncclMin, comm, stream)},
		{"GroupStart", api.GroupStart()},
		{"Send", api.Send(send, count, ncclInt8, 1, comm, stream)},
		{"Recv", api.Recv(recv, count, ncclUint8, 0, comm, stream)},
		{"GroupEnd", api.GroupEnd()},
		{"RedOpCreatePreMulSum", api.RedOpCreatePreMulSum(&op, &scalar[0], ncclFloat64, ncclScalarHostImmediate, comm)},
		{"RedOpDestroy", api.RedOpDestroy(5, comm)},
	} {
		if tt.r != ncclSuccess {
			t.Errorf("%s = %d, want 0 (100+i: argument i arrived wrong)", tt.call, tt.r)
		}
	}
	if c != comm || split != 0x5678 || async != ncclInProgress || op != 5 {
		t.Errorf("out parameters: comm %#x, split %#x, async %d, op %d; want 0x1234, 0x5678, 7, 5", c, split, async, op)
	}
	if r := api.GroupEnd(); r != ncclInvalidUsage {
		t.Errorf("unmatched GroupEnd = %d, want %d", r, ncclInvalidUsage)
	}
	if s := api.GetErrorString(ncclInvalidUsage); s != "invalid usage" {
		t.Errorf("GetErrorString(5) = %q", s)
	}
	if s, s0 := api.GetLastError(comm), api.GetLastError(0); s != "last error of the comm" || s0 != "last error of the thread" {
		t.Errorf("GetLastError = %q, %q", s, s0)
	}
}

// TestNCCLTooOld: an NCCL before 2.23 is refused by its version, before
// its other symbols are looked for, and the search goes on past it.
func TestNCCLTooOld(t *testing.T) {
	old := buildStubNCCL(t, t.TempDir(), "-DVERSION=22203", "-DONLY_VERSION")
	_, err := openNCCL(old, nil)
	if err == nil || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "NCCL 2.22.3 is older than 2.23.0") {
		t.Errorf("openNCCL(NCCL 2.22.3) error = %v, want it refused as older than 2.23.0", err)
	}
	if _, err := openNCCLFile(ncclSoname); err == nil {
		t.Skip("the system loader has an NCCL; the search would end there")
	}
	wheelOf := func(prefix, lib string) {
		f := filepath.Join(prefix, "lib", "python3.11", "site-packages", "nvidia", "nccl", "lib", "libnccl.so.2")
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(lib, f); err != nil {
			t.Fatal(err)
		}
	}
	p1, p2 := t.TempDir(), t.TempDir()
	wheelOf(p1, old)
	wheelOf(p2, buildStubNCCL(t, t.TempDir(), "-DVERSION=22304"))
	nc, err := openNCCL("", []string{p1, p2})
	if err != nil || nc.version != 22304 {
		t.Errorf("search past NCCL 2.22.3 = version %d, %v; want the 2.23.4 after it", nc.version, err)
	}
}
