package commtest

import (
	"slices"
	"sync"
)

// memo holds, for the few cases in progress in this process, the inputs
// and reductions already computed, so that the ranks of an in-process world
// compute each rank's input (and each shared expected result, such as an
// AllReduce's) once instead of once per rank that needs it. It changes no
// result: every entry is a pure function of its key. In a multi-process
// world each process simply computes what its rank needs.
//
// Entries are immutable once made; callers must not modify the bytes.
var memo = &memoTable{entries: map[memoKey]*memoEntry{}}

// memoCases is how many cases the memo holds: ranks of one world are at
// most a case or so apart, since every case is a collective (or a ring).
const memoCases = 3

type memoTable struct {
	mu      sync.Mutex // guards seeds and entries
	seeds   []uint64   // the cases held, oldest first
	entries map[memoKey]*memoEntry
}

// memoKey names an input block (what 'i': elements [off, off+n) of rank's
// input) or a reduction (what 'r': over ranks [lo, hi) at [off, off+n)).
type memoKey struct {
	seed, size uint64
	what       byte
	op         uint8
	rank       int
	lo, hi     int
	off, n     int
}

type memoEntry struct {
	once sync.Once
	b    []byte
}

// get returns the entry for k, computing it with make if no one has.
// Concurrent callers of one key wait for the one computation.
func (m *memoTable) get(k memoKey, make func() []byte) []byte {
	m.mu.Lock()
	e := m.entries[k]
	if e == nil {
		if !slices.Contains(m.seeds, k.seed) {
			m.seeds = append(m.seeds, k.seed)
			if len(m.seeds) > memoCases {
				m.dropLocked(m.seeds[0])
			}
		}
		e = &memoEntry{}
		m.entries[k] = e
	}
	m.mu.Unlock()
	e.once.Do(func() { e.b = make() })
	return e.b
}

// drop forgets the entries of a case (a rank that still needs them
// recomputes them).
func (m *memoTable) drop(seed uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if slices.Contains(m.seeds, seed) {
		m.dropLocked(seed)
	}
}

func (m *memoTable) dropLocked(seed uint64) {
	for k := range m.entries {
		if k.seed == seed {
			delete(m.entries, k)
		}
	}
	m.seeds = slices.DeleteFunc(m.seeds, func(s uint64) bool { return s == seed })
}
