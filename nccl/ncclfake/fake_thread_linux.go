//go:build linux

package ncclfake

import "syscall"

// fakeThreadID identifies the calling OS thread, for the state CUDA (the
// current context) and NCCL (the group) keep per thread. Callers run on a
// locked thread (nccl's Device.do), as they must with the real libraries.
func fakeThreadID() int { return syscall.Gettid() }
