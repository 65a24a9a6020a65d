package nccl

import (
	"sync"

	"github.com/hiercomm/hiercomm/nccl/internal/cuapi"
)

// TraceGroups makes lib's NCCL note its group and collective calls, for
// the external tests that check what a batch queues: calls returns their
// names so far, in order ("GroupStart", "AllReduce", …). Call it before
// any communicator is made on lib.
func TraceGroups(lib *Library) (calls func() []string) {
	t := &groupTrace{NCCL: lib.nccl}
	lib.nccl = t
	return func() []string {
		t.mu.Lock()
		defer t.mu.Unlock()
		return append([]string(nil), t.calls...)
	}
}

// groupTrace is an NCCL table that notes the calls TraceGroups names.
type groupTrace struct {
	cuapi.NCCL
	mu    sync.Mutex
	calls []string
}

func (t *groupTrace) note(name string) {
	t.mu.Lock()
	t.calls = append(t.calls, name)
	t.mu.Unlock()
}

func (t *groupTrace) GroupStart() cuapi.NCCLResult {
	t.note("GroupStart")
	return t.NCCL.GroupStart()
}

func (t *groupTrace) GroupEnd() cuapi.NCCLResult {
	t.note("GroupEnd")
	return t.NCCL.GroupEnd()
}

func (t *groupTrace) AllReduce(send, recv uintptr, count uintptr, dt cuapi.DataType, op cuapi.RedOp, c cuapi.Comm, s cuapi.Stream) cuapi.NCCLResult {
	t.note("AllReduce")
	return t.NCCL.AllReduce(send, recv, count, dt, op, c, s)
}

func (t *groupTrace) Broadcast(send, recv uintptr, count uintptr, dt cuapi.DataType, root int32, c cuapi.Comm, s cuapi.Stream) cuapi.NCCLResult {
	t.note("Broadcast")
	return t.NCCL.Broadcast(send, recv, count, dt, root, c, s)
}
