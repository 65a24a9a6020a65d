package nexar

import (
	"sync"
	"sync/atomic"
	"time"
)

// Hop tracing: timestamps at each hop of a message's way through this
// package (the call, the executor, the write, the peer's read, matching,
// the receiver's wakeup, the reduction, the return), for the per-hop
// budget in docs/transports.md (BenchmarkHops). Off, each hop costs one
// atomic load.

// hop is a point on a message's or a call's way.
type hop uint8

const (
	hopCall    hop = iota // a blocking call enters the communicator
	hopAdmit              // the executor has numbered it and made its op
	hopWrite              // a data frame's write to the transport begins
	hopWritten            // ... and has returned
	hopRead               // the peer's read loop has the whole frame
	hopMatched            // the frame is handed to the receive waiting for it (not marked when it comes first and is kept)
	hopWoken              // the receive's goroutine runs with it
	hopDone               // the receive step is done (reduced or copied)
	hopReturn             // the blocking call returns
	numHops
)

// hopEvent is one timestamp: at rank (a world rank), about the frame
// (peer, seq, step) when the hop is a frame's (peer is the other end).
type hopEvent struct {
	at         time.Duration // since the log began
	hop        hop
	rank, peer int32
	seq        uint64
	step       uint32
}

// hopLog collects events while it is installed in hopTrace.
type hopLog struct {
	base time.Time
	mu   sync.Mutex
	ev   []hopEvent
}

var hopTrace atomic.Pointer[hopLog]

// traceHops starts recording into a fresh log and returns the function
// that stops recording and returns the events.
func traceHops(capacity int) func() []hopEvent {
	l := &hopLog{base: time.Now(), ev: make([]hopEvent, 0, capacity)}
	hopTrace.Store(l)
	return func() []hopEvent {
		hopTrace.CompareAndSwap(l, nil)
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.ev
	}
}

// markHop records a hop if tracing is on.
func markHop(h hop, rank, peer int, seq uint64, step uint32) {
	l := hopTrace.Load()
	if l == nil {
		return
	}
	at := time.Since(l.base)
	l.mu.Lock()
	l.ev = append(l.ev, hopEvent{at: at, hop: h, rank: int32(rank), peer: int32(peer), seq: seq, step: step})
	l.mu.Unlock()
}
