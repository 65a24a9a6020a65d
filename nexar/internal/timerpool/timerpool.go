// Package timerpool keeps stopped timers for reuse, so that a wait with a
// deadline on the hot path (a blocking receive's, a send behind a busy
// link's) allocates no timer. It is shared by nexar's runtime and its
// transports (nexar/transport/netmesh); it imports nothing of ours.
package timerpool

import (
	"sync"
	"time"
)

// pool holds stopped timers. Since Go 1.23 a stopped timer's channel holds
// no stale tick, so Reset starts it clean.
var pool sync.Pool

// Get returns a timer that fires after d.
func Get(d time.Duration) *time.Timer {
	if t, ok := pool.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// Put stops t and keeps it for a later Get. The caller must not use t
// afterwards.
func Put(t *time.Timer) {
	t.Stop()
	pool.Put(t)
}
