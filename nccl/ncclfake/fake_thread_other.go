//go:build !linux

package ncclfake

// fakeThreadID identifies the calling OS thread where the fake can tell
// threads apart (Linux); elsewhere the whole process is one thread: the
// current context and the NCCL group are shared by every goroutine, which
// is right only while one thread at a time uses the fake.
func fakeThreadID() int { return 0 }
