//go:build linux

package shm

import (
	"bytes"
	"math"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// The system calls of the package, Linux only. Everything else is portable
// and builds everywhere; on other systems New stops at supported.

const supported = true

// shmDir is where segments live: tmpfs, shared by every process of the host.
const shmDir = "/dev/shm"

func openFile(path string, flags int) (int, error) {
	return syscall.Open(path, flags|syscall.O_RDWR|syscall.O_CLOEXEC, 0o600)
}

const (
	oCreate = syscall.O_CREAT
	oExcl   = syscall.O_EXCL
)

func closeFile(fd int) { syscall.Close(fd) }

// sizeFile gives the file its size and reserves its pages, so that a full
// /dev/shm is an error now (ENOSPC) instead of a SIGBUS later.
func sizeFile(fd int, size int64) error {
	if err := syscall.Ftruncate(fd, size); err != nil {
		return err
	}
	if err := syscall.Fallocate(fd, 0, 0, size); err != nil && err != syscall.EOPNOTSUPP {
		return err
	}
	return nil
}

// fileID is (device, inode) of an open file or a path: how a rank tells
// that the name still points at the segment it mapped before unlinking it.
type fileID struct{ dev, ino uint64 }

func fstatID(fd int) (fileID, int64, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fileID{}, 0, err
	}
	return fileID{uint64(st.Dev), st.Ino}, st.Size, nil
}

func statID(path string) (fileID, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileID{}, err
	}
	return fileID{uint64(st.Dev), st.Ino}, nil
}

func mapFile(fd int, size int) ([]byte, error) {
	return syscall.Mmap(fd, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

func unmapFile(b []byte) error { return syscall.Munmap(b) }

func linkFile(from, to string) error { return syscall.Link(from, to) }

// oTmpfile is O_TMPFILE where its value is the generic one (__O_TMPFILE is
// 020000000 on these architectures), else 0: no unnamed files.
var oTmpfile = func() int {
	switch runtime.GOARCH {
	case "amd64", "386", "arm64", "arm", "riscv64", "loong64", "ppc64", "ppc64le", "s390x":
		return 0o20000000 | syscall.O_DIRECTORY
	}
	return 0
}()

// createUnnamed opens a new file in dir that has no name (O_TMPFILE), so
// nothing of it is visible until linkUnnamed names it; an error means the
// system cannot, and the caller uses a named temporary file instead.
func createUnnamed(dir string) (int, error) {
	if oTmpfile == 0 {
		return -1, syscall.EOPNOTSUPP
	}
	return syscall.Open(dir, oTmpfile|syscall.O_RDWR|syscall.O_CLOEXEC, 0o600)
}

// linkUnnamed gives the unnamed file fd the name path, failing with EEXIST
// if the name exists.
func linkUnnamed(fd int, path string) error {
	from, err := syscall.BytePtrFromString("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return err
	}
	to, err := syscall.BytePtrFromString(path)
	if err != nil {
		return err
	}
	const atSymlinkFollow = 0x400
	cwd := -100 // AT_FDCWD
	_, _, errno := syscall.Syscall6(syscall.SYS_LINKAT, uintptr(cwd), uintptr(unsafe.Pointer(from)),
		uintptr(cwd), uintptr(unsafe.Pointer(to)), atSymlinkFollow, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func unlinkFile(path string) error { return syscall.Unlink(path) }

// futexSleep blocks while *addr == val, for at most d. The word is in a
// MAP_SHARED mapping, so the futex is the shared kind (no FUTEX_PRIVATE
// flag): the kernel keys it by the page, and a wake from another process
// reaches it.
func futexSleep(addr *uint32, val uint32, d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), 0 /* FUTEX_WAIT */, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWakeAll wakes every sleeper on addr.
func futexWakeAll(addr *uint32) {
	syscall.RawSyscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), 1 /* FUTEX_WAKE */, math.MaxInt32, 0, 0, 0)
}

// osYield gives the CPU to another runnable thread of the host: with more
// ranks than cores, the rank we wait for may be waiting for this core.
func osYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// selfIdentity is this process's pid, its start time and its pid
// namespace, which together name it on the host even across pid reuse.
func selfIdentity() procID {
	pid := os.Getpid()
	return procID{pid: uint64(pid), start: startTime(pid), ns: pidNamespace()}
}

// pidNamespace is the inode of this process's pid namespace, or 0 when
// unknown: pids are only compared between processes of one namespace.
func pidNamespace() uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0
	}
	return st.Ino
}

// startTime is field 22 of /proc/<pid>/stat (clock ticks since boot), or 0
// when unreadable.
func startTime(pid int) uint64 {
	st, ok := procStat(pid)
	if !ok {
		return 0
	}
	return startOf(st)
}

// startOf is the start time in the part of a stat line procStat returns.
func startOf(st []byte) uint64 {
	f := bytes.Fields(st)
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(string(f[19]), 10, 64) // field 22 is the 20th after "pid (comm)"
	return v
}

// procStat returns the part of /proc/<pid>/stat after the command name.
func procStat(pid int) ([]byte, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return nil, false
	}
	return b[i+2:], true
}

// processGone reports whether the process p (of our pid namespace) is
// certainly gone: no such pid, a zombie, or a different process that
// reused the pid. Unknown is not gone.
func processGone(p procID) bool {
	if p.pid == 0 || p.pid > math.MaxInt32 {
		return p.pid != 0
	}
	if p.ns == 0 || p.ns != pidNamespace() {
		return false
	}
	pid := int(p.pid)
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return true
	}
	st, ok := procStat(pid)
	if !ok {
		return false
	}
	if len(st) > 0 && (st[0] == 'Z' || st[0] == 'X') {
		return true
	}
	s := startOf(st)
	return p.start != 0 && s != 0 && s != p.start
}

func listDir(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
