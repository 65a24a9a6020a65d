// Package hoptrace timestamps the hops of small calls through the tiers
// (nexar's frames, shared memory's steps, the hierarchy's parts) for the
// per-hop budgets in docs/transports.md. Tests and benchmarks turn it on
// with Start; off, a hop costs one atomic load.
package hoptrace

import (
	"sync"
	"sync/atomic"
	"time"
)

// Hop is a point on a call's or a message's way.
type Hop uint8

// nexar's hops: a message's way through the transport and the
// communicator.
const (
	Call    Hop = iota // a blocking call enters the communicator
	Admit              // the executor has numbered it and made its op
	Write              // a data frame's write to the transport begins
	Written            // ... and has returned
	Read               // the peer's read loop has the whole frame
	Matched            // the frame is handed to the receive waiting for it (not marked when it comes first and is kept)
	Woken              // the receive's goroutine runs with it
	Done               // the receive step is done (reduced or copied)
	Return             // the blocking call returns
)

// Shared memory's and the hierarchy's hops.
const (
	ShmCall    Hop = 16 + iota // a blocking call enters a shm communicator
	ShmPosted                  // a step's part is written and posted
	ShmSeen                    // every node-mate has posted that step
	ShmReturn                  // the call returns
	HierCall                   // a blocking call enters the hierarchy
	PartCall                   // the hierarchy calls a part (Peer: its PartKind)
	PartReturn                 // ... and the part's call has returned
	HierReturn                 // the hierarchy's call returns
	NumHops
)

// The hierarchy's parts, in Event.Peer of PartCall and PartReturn.
const (
	PartIntra = iota
	PartRail
	PartWorld
)

// Event is one timestamp: at Rank (a global or world rank), about the
// frame or step (Peer, Seq, Step) when the hop has one.
type Event struct {
	At         time.Duration // since the trace began
	Hop        Hop
	Rank, Peer int32
	Seq        uint64
	Step       uint32
}

type log struct {
	base time.Time
	mu   sync.Mutex
	ev   []Event
}

var on atomic.Pointer[log]

// Start begins a trace and returns the function that ends it and returns
// its events in the order they were marked.
func Start(capacity int) (stop func() []Event) {
	l := &log{base: time.Now(), ev: make([]Event, 0, capacity)}
	on.Store(l)
	return func() []Event {
		on.CompareAndSwap(l, nil)
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.ev
	}
}

// On reports whether a trace is running (for marks that must compute
// something first).
func On() bool { return on.Load() != nil }

// Mark records hop h if a trace is running.
func Mark(h Hop, rank, peer int, seq uint64, step uint32) {
	l := on.Load()
	if l == nil {
		return
	}
	at := time.Since(l.base)
	l.mu.Lock()
	l.ev = append(l.ev, Event{At: at, Hop: h, Rank: int32(rank), Peer: int32(peer), Seq: seq, Step: step})
	l.mu.Unlock()
}
