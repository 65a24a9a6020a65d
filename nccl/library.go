package nccl

import (
	"sync"

	"github.com/hiercomm/hiercomm/nccl/internal/cuapi"
)

// Library is a loaded CUDA driver and NCCL: the real ones (Load, Default)
// or, in tests, an in-process double behind the same function table
// (nccl/internal/cuapi). Everything else in this package hangs
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

// init lets nccl/ncclfake make a Library of its table, and see the table
// behind one, without this package exporting either (cuapi.NewLibrary,
// cuapi.TableOf).
func init() {
	cuapi.NewLibrary = func(t cuapi.Table) any {
		return &Library{drv: t.Driver, nccl: t.NCCL, driverVersion: t.DriverVersion, ncclVersion: t.NCCLVersion,
			where: t.Where, devices: map[int]*Device{}}
	}
	cuapi.TableOf = func(lib any) cuapi.Table {
		l := lib.(*Library)
		return cuapi.Table{Driver: l.drv, NCCL: l.nccl, DriverVersion: l.driverVersion, NCCLVersion: l.ncclVersion, Where: l.where}
	}
}

// DriverVersion is the CUDA driver API version (1000·major + 10·minor).
func (l *Library) DriverVersion() int { return l.driverVersion }

// NCCLVersion is NCCL's version code (10000·major + 100·minor + patch).
func (l *Library) NCCLVersion() int { return l.ncclVersion }

// String says what was loaded from where.
func (l *Library) String() string { return l.where }
