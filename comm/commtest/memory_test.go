package commtest

import (
	"sync"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// countingMemory is Go memory that counts what is outstanding, and hands
// out buffers whose bytes were garbage, so that the suite must Write what it
// relies on.
type countingMemory struct {
	mu    sync.Mutex // guards live and total
	live  map[*byte]bool
	total int
}

func (m *countingMemory) Alloc(dt comm.DType, n int) (comm.Buffer, error) {
	b, err := hostMemory{}.Alloc(dt, n)
	if err != nil || n == 0 {
		return b, err
	}
	garbage(b.Bytes(), uint64(n))
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live[&b.Bytes()[0]] = true
	m.total++
	return b, nil
}

func (m *countingMemory) Write(b comm.Buffer, src []byte) error { return hostMemory{}.Write(b, src) }
func (m *countingMemory) Read(dst []byte, b comm.Buffer) error  { return hostMemory{}.Read(dst, b) }

func (m *countingMemory) Free(b comm.Buffer) {
	if b.Len() == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.live[&b.Bytes()[0]] {
		panic("commtest: Free of a buffer that is not live")
	}
	delete(m.live, &b.Bytes()[0])
}

// Every buffer the suites allocate through Options.Memory is freed.
func TestMemoryBalanced(t *testing.T) {
	mem := &countingMemory{live: map[*byte]bool{}}
	o := small
	o.Memory = mem
	comms := newRefWorld(3, noBug)
	Run(t, comms, o)
	RunP2P(t, comms, o)
	RunNonBlocking(t, comms, o)
	RunSplit(t, comms, o)
	RunBadInput(t, comms, o)
	RunMismatch(t, comms, o)
	if len(mem.live) != 0 || mem.total == 0 {
		t.Errorf("%d of %d buffers not freed", len(mem.live), mem.total)
	}
}
