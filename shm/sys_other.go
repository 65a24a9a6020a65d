//go:build !linux

package shm

import (
	"errors"
	"time"
)

// Shared-memory communicators need Linux (futexes on shared mappings,
// /dev/shm); elsewhere New fails with errUnsupported and nothing here runs.

const supported = false

const shmDir = "/dev/shm"

var errUnsupported = errors.New("shm: not supported on this system")

const (
	oCreate = 0
	oExcl   = 0
)

type fileID struct{ dev, ino uint64 }

func openFile(string, int) (int, error)         { return -1, errUnsupported }
func closeFile(int)                             {}
func sizeFile(int, int64) error                 { return errUnsupported }
func fstatID(int) (fileID, int64, error)        { return fileID{}, 0, errUnsupported }
func statID(string) (fileID, error)             { return fileID{}, errUnsupported }
func mapFile(int, int) ([]byte, error)          { return nil, errUnsupported }
func unmapFile([]byte) error                    { return errUnsupported }
func linkFile(string, string) error             { return errUnsupported }
func createUnnamed(string) (int, error)         { return -1, errUnsupported }
func linkUnnamed(int, string) error             { return errUnsupported }
func unlinkFile(string) error                   { return errUnsupported }
func futexSleep(*uint32, uint32, time.Duration) {}
func futexWakeAll(*uint32)                      {}
func osYield()                                  {}
func selfIdentity() procID                      { return procID{} }
func processGone(procID) bool                   { return false }
func listDir(string) ([]string, error)          { return nil, errUnsupported }
