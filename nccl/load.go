package nccl

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Loading: finding libcuda.so.1 and libnccl.so.2, binding them (real.go),
// and the checks that make a loaded pair usable: cuInit succeeds and NCCL
// is 2.23.0 or later. Every failure says what was tried and what each
// attempt said, in the dynamic loader's or the driver's own words.

// LoadOptions says which libraries Load uses; the zero value searches.
type LoadOptions struct {
	// NCCLPath is the libnccl.so.2 to load, and then the only one tried.
	// If empty, the first NCCL 2.23.0 or later that loads among: the system
	// loader's libnccl.so.2 (LD_LIBRARY_PATH, ld.so.cache), then NCCL's
	// Python wheels (nvidia-nccl-cu12, -cu13: lib/python3*/site-packages/
	// nvidia/nccl/lib/libnccl.so.2) in the Python installations that can
	// be found without running Python: $VIRTUAL_ENV, $CONDA_PREFIX,
	// /usr/local, /usr, ~/.local and pyenv's versions.
	NCCLPath string
	// CUDAPath is the CUDA driver library to load. If empty, the system
	// loader's libcuda.so.1.
	CUDAPath string
}

// Environment variables that name LoadOptions' paths, for error messages:
// launchenv.LoadLaunch reads them, and hiercomm.Init passes them to Shared.
const (
	envNCCLLibrary = "HIERCOMM_NCCL_LIBRARY" // LoadOptions.NCCLPath
	envCUDALibrary = "HIERCOMM_CUDA_LIBRARY" // LoadOptions.CUDAPath
)

// The names the system loader is asked for when no path is given.
const (
	cudaSoname = "libcuda.so.1"
	ncclSoname = "libnccl.so.2"
)

// Load loads the CUDA driver and NCCL named by opt, binds every entry
// point this package calls, initializes the driver (cuInit(0)) and checks
// NCCL's version. It fails, saying why, when a library is missing or lacks
// a symbol, when cuInit fails (on a machine without a GPU: the driver's
// CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected", as a
// *CUDAError), or when no NCCL 2.23.0 or later is found; every such error
// wraps ErrUnavailable. Load reads no environment variable except
// those naming Python installations (see LoadOptions.NCCLPath): where
// other tools put NCCL, as the system loader reads LD_LIBRARY_PATH.
//
// Libraries are never unloaded: a Library stays valid for the life of the
// process, and loading the same files again is cheap.
func Load(opt LoadOptions) (*Library, error) {
	drv, drvWhere, err := openDriver(opt.CUDAPath)
	if err != nil {
		return nil, err
	}
	lib := &Library{drv: drv.api, driverVersion: drv.version, devices: map[int]*Device{}}
	if r := drv.api.Init(0); r != cudaSuccess {
		return nil, cuInitError(lib.drv, drvWhere, r)
	}
	var prefixes []string
	if opt.NCCLPath == "" {
		prefixes = pythonPrefixes()
	}
	nc, err := openNCCL(opt.NCCLPath, prefixes)
	if err != nil {
		return nil, err
	}
	lib.nccl, lib.ncclVersion = nc.api, nc.version
	lib.where = fmt.Sprintf("%s + %s (NCCL %s)", drvWhere, nc.file, ncclVersionString(nc.version))
	return lib, nil
}

// LoadDriver loads only the CUDA driver library (path, or the system
// loader's libcuda.so.1 when empty) and binds every driver entry point
// this package calls, without initializing the driver and without NCCL:
// the Library reports DriverVersion (cuDriverGetVersion needs no GPU) and
// DeviceCount, and can make Devices, but no communicator. It is for tools
// and tests that check a driver installation.
func LoadDriver(path string) (*Library, error) {
	drv, where, err := openDriver(path)
	if err != nil {
		return nil, err
	}
	return &Library{drv: drv.api, driverVersion: drv.version, where: where, devices: map[int]*Device{}}, nil
}

// Shared is the Library that opt names, loaded by the first call with the
// same options and kept for the life of the process, error included (a
// machine does not grow a GPU while a job runs). hiercomm.Init loads it
// with the paths of the launch environment (HIERCOMM_NCCL_LIBRARY and
// HIERCOMM_CUDA_LIBRARY, read by launchenv.LoadLaunch). Safe for concurrent
// use.
func Shared(opt LoadOptions) (*Library, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	r, ok := shared[opt]
	if !ok {
		r.lib, r.err = Load(opt)
		shared[opt] = r
	}
	return r.lib, r.err
}

// Default is Shared(LoadOptions{}): the libraries the search finds.
func Default() (*Library, error) { return Shared(LoadOptions{}) }

// shared holds Shared's results, by options.
var (
	sharedMu sync.Mutex
	shared   = map[LoadOptions]struct {
		lib *Library
		err error
	}{}
)

// Available reports whether this process can use a GPU through this
// package with the libraries the search finds: nil when Default loads and
// the driver sees at least one device;
// otherwise an error saying why (no driver library, cuInit's reason, no
// NCCL 2.23.0 or later, ...), fit to show a user or to skip a test with.
// The driver is looked at before NCCL, so on a machine without a GPU the
// reason is the driver's.
func Available() error {
	lib, err := Default()
	if err != nil {
		return err
	}
	n, err := lib.DeviceCount()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: the CUDA driver sees no device (%s)", ErrUnavailable, lib.where)
	}
	return nil
}

// DeviceCount is the number of CUDA devices the driver sees
// (cuDeviceGetCount). It first initializes the driver (cuInit(0); a no-op
// once done), so on a Library from LoadDriver it reports cuInit's reason
// when no device can be used (an error wrapping ErrUnavailable and a
// *CUDAError).
func (l *Library) DeviceCount() (int, error) {
	if r := l.drv.Init(0); r != cudaSuccess {
		return 0, cuInitError(l.drv, l.where, r)
	}
	var n int32
	if r := l.drv.DeviceGetCount(&n); r != cudaSuccess {
		return 0, &CUDAError{Call: "cuDeviceGetCount in " + l.where, Code: int(r), Text: l.drv.ErrorString(r)}
	}
	return int(n), nil
}

// cuInitError is a failed cuInit in the driver's own words: the GPU tier
// is unavailable, and why.
func cuInitError(drv driverAPI, where string, r cuResult) error {
	return fmt.Errorf("%w: %w", ErrUnavailable, &CUDAError{Call: "cuInit(0) in " + where, Code: int(r), Text: drv.ErrorString(r)})
}

// openedDriver is a bound CUDA driver library.
type openedDriver struct {
	api     *realDriver
	version int // cuDriverGetVersion
}

// openDriver loads and binds the CUDA driver library at path (the system
// loader's libcuda.so.1 when empty) and reads its version. where says
// which file it is and its version, e.g. "/usr/lib/x86_64-linux-gnu/
// libcuda.so.580.159 (driver 13000)".
func openDriver(path string) (drv openedDriver, where string, err error) {
	name, how := path, ""
	if path == "" {
		name, how = cudaSoname, " via the system loader"
	}
	handle, err := dlopen(name)
	if err != nil {
		hint := ""
		if path == "" {
			hint = "; is the NVIDIA driver installed? Put its libcuda.so.1 on the loader path (LD_LIBRARY_PATH, ldconfig) or name it in " + envCUDALibrary
		}
		return drv, "", fmt.Errorf("%w: cannot load the CUDA driver library %s%s: %v%s", ErrUnavailable, name, how, err, hint)
	}
	api := &realDriver{}
	if err := bindSymbols(handle, name, api.symbols()); err != nil {
		dlclose(handle)
		return drv, "", fmt.Errorf("%w: %s%s is not a usable CUDA driver library: %v", ErrUnavailable, name, how, err)
	}
	file := loadedFile(handle, "cuInit", name)
	var v int32
	if r := api.DriverGetVersion(&v); r != cudaSuccess {
		return drv, "", fmt.Errorf("%w: %w", ErrUnavailable, &CUDAError{Call: "cuDriverGetVersion in " + file, Code: int(r), Text: api.ErrorString(r)})
	}
	return openedDriver{api: api, version: int(v)}, fmt.Sprintf("%s (driver %d)", file, v), nil
}

// openedNCCL is a bound NCCL library.
type openedNCCL struct {
	api     *realNCCL
	version int    // ncclGetVersion's code
	file    string // the file loaded
}

// openNCCL opens the NCCL at path; or, when path is empty, the first that
// loads, is 2.23.0 or later and has every entry point, among the system
// loader's libnccl.so.2 and the Python wheels under prefixes, in that
// order. The error names each place tried and why it was passed over.
func openNCCL(path string, prefixes []string) (openedNCCL, error) {
	if path != "" {
		nc, err := openNCCLFile(path)
		if err != nil {
			return openedNCCL{}, fmt.Errorf("%w: cannot use the NCCL library %s: %v", ErrUnavailable, path, err)
		}
		return nc, nil
	}
	var tried []string
	nc, err := openNCCLFile(ncclSoname)
	if err == nil {
		return nc, nil
	}
	tried = append(tried, fmt.Sprintf("%s via the system loader: %v", ncclSoname, err))
	wheels := ncclWheelFiles(prefixes)
	for _, f := range wheels {
		nc, err := openNCCLFile(f)
		if err == nil {
			return nc, nil
		}
		tried = append(tried, fmt.Sprintf("%s: %v", f, err))
	}
	if len(wheels) == 0 {
		tried = append(tried, fmt.Sprintf("NCCL's Python wheel (lib/python3*/{site,dist}-packages/nvidia/nccl/lib/%s) under %s: none there",
			ncclSoname, strings.Join(prefixes, ", ")))
	}
	return openedNCCL{}, fmt.Errorf("%w: found no usable NCCL (%s, %s or later); tried %s; "+
		"install NCCL (e.g. pip install nvidia-nccl-cu12) or name its libnccl.so.2 in %s",
		ErrUnavailable, ncclSoname, ncclVersionString(minVersionCode), strings.Join(tried, "; "), envNCCLLibrary)
}

// openNCCLFile loads and binds one NCCL library, and unloads it again if
// it is passed over. A library that is not NCCL at all is told by its
// lacking ncclGetVersion; one too old, by its version, before its other
// symbols are looked at.
func openNCCLFile(path string) (openedNCCL, error) {
	handle, err := dlopen(path)
	if err != nil {
		return openedNCCL{}, err
	}
	api := &realNCCL{}
	v, err := bindNCCL(handle, path, api)
	if err != nil {
		dlclose(handle)
		return openedNCCL{}, err
	}
	return openedNCCL{api: api, version: v, file: loadedFile(handle, "ncclGetVersion", path)}, nil
}

// bindNCCL checks the NCCL behind handle and binds it into api, returning
// its version code.
func bindNCCL(handle uintptr, path string, api *realNCCL) (int, error) {
	syms := api.symbols()
	if err := bindSymbols(handle, path, syms[:1]); err != nil { // ncclGetVersion
		return 0, fmt.Errorf("not NCCL: %v", err)
	}
	var v int32
	if r := api.GetVersion(&v); r != ncclSuccess {
		return 0, fmt.Errorf("ncclGetVersion returned ncclResult %d", r)
	}
	if v < minVersionCode {
		return 0, fmt.Errorf("NCCL %s is older than %s, the first with ncclCommInitRankScalable",
			ncclVersionString(int(v)), ncclVersionString(minVersionCode))
	}
	return int(v), bindSymbols(handle, path, syms[1:])
}

// ncclWheelFiles lists the libnccl.so.2 of NCCL's Python wheels
// (nvidia/nccl/lib/ in site-packages, or Debian's dist-packages) under
// each prefix in turn, each file once.
func ncclWheelFiles(prefixes []string) []string {
	var out []string
	for _, prefix := range prefixes {
		for _, dir := range []string{"site-packages", "dist-packages"} {
			found, _ := filepath.Glob(filepath.Join(prefix, "lib", "python3*", dir, "nvidia", "nccl", "lib", ncclSoname))
			for _, f := range found {
				if !slices.Contains(out, f) {
					out = append(out, f)
				}
			}
		}
	}
	return out
}

// pythonPrefixes are the Python installations searched for NCCL's wheel,
// found without running Python: the active virtual and conda environments,
// the system's (pip installs into /usr/local), the user's, and pyenv's.
func pythonPrefixes() []string {
	var out []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := os.Getenv(v); p != "" {
			out = append(out, p)
		}
	}
	out = append(out, "/usr/local", "/usr")
	home, _ := os.UserHomeDir()
	if home != "" {
		out = append(out, filepath.Join(home, ".local"))
	}
	pyenv := os.Getenv("PYENV_ROOT")
	if pyenv == "" && home != "" {
		pyenv = filepath.Join(home, ".pyenv")
	}
	if pyenv != "" {
		versions, _ := filepath.Glob(filepath.Join(pyenv, "versions", "*"))
		out = append(out, versions...)
	}
	return out
}

// loadedFile is the file the dynamic loader mapped for the library behind
// handle, found through one of its symbols in /proc/self/maps, so that
// logs say which libnccl.so.2 or libcuda.so.1 of several was used; name
// when that cannot be told (not Linux, no /proc).
func loadedFile(handle uintptr, symbol, name string) string {
	addr, err := dlsym(handle, symbol)
	if err != nil {
		return name
	}
	file, err := mappedFile(addr)
	if err != nil {
		return name
	}
	return file
}

// mappedFile is the file mapped at addr in this process.
func mappedFile(addr uintptr) (string, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.HasPrefix(fields[5], "/") {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 == nil && err2 == nil && uint64(addr) >= start && uint64(addr) < end {
			return strings.Join(fields[5:], " "), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("address not in a mapped file")
}
