package nccl

import "sync"

// Library is a loaded CUDA driver and NCCL: the real ones (Load, Default)
// or the in-process fake (NewFake). Everything else in this package hangs
// off a Library: its Devices, and the communicators made on them.
type Library struct {
	drv  driverAPI
	nccl ncclAPI
	// driverVersion is cuDriverGetVersion's (e.g. 12020); ncclVersion is
	// ncclGetVersion's code (e.g. 22803).
	driverVersion, ncclVersion int
	// where says which files were loaded (or "fake"), for logs and errors.
	where string

	mu      sync.Mutex // guards devices
	devices map[int]*Device
}

// DriverVersion is the CUDA driver API version (1000·major + 10·minor).
func (l *Library) DriverVersion() int { return l.driverVersion }

// NCCLVersion is NCCL's version code (10000·major + 100·minor + patch).
func (l *Library) NCCLVersion() int { return l.ncclVersion }

// String says what was loaded from where.
func (l *Library) String() string { return l.where }
