package tier

import (
	"fmt"
	"time"
)

// Timeouts are the bounds on waiting that every tier takes, in one
// vocabulary: the same name means the same thing, with the same default,
// in nexar (Options.Timeout, NetConfig.FailureTimeout and ConnectTimeout),
// shm (Config.Timeout, FailureTimeout, ConnectTimeout) and hiercomm
// (Options, and the Plan that prints what each tier got). A zero field
// takes its default, DefaultTimeouts(medium)'s; none may be negative.
//
// Every rank of a world must be given the same FailureTimeout: a rank
// signs of life (keepalives, heartbeats) at a fraction of its own, and a
// peer judges silence by its own, so a rank with a longer one than its
// peers' would be declared failed while it runs (hiercomm.Init checks
// that the ranks agree before the world forms). Timeout and
// ConnectTimeout may differ between ranks: the first rank whose bound
// runs out ends the operation everywhere.
type Timeouts struct {
	// Timeout bounds one operation (a collective, a Send, a Recv) whose
	// context has no earlier deadline. Its end fails the operation on
	// every rank, as the context's would. Default: DefaultTimeout.
	Timeout time.Duration
	// FailureTimeout is how long a peer may stay silent (no packet, no
	// heartbeat) before it is declared failed: a process that is stopped,
	// hung or cut off. A process that dies is usually seen much sooner
	// (its connections close, its pid vanishes). Default: the medium's
	// (NetworkFailureTimeout, SharedMemoryFailureTimeout).
	FailureTimeout time.Duration
	// ConnectTimeout bounds the forming of a world: every rank must have
	// connected (a network mesh) or attached (a node's shared memory)
	// within it. Default: DefaultConnectTimeout.
	ConnectTimeout time.Duration
}

// A Medium is what a tier's ranks communicate through; FailureTimeout's
// default depends on it.
type Medium uint8

const (
	// Network: sockets between processes (nexar's QUIC and TCP).
	Network Medium = iota + 1
	// SharedMemory: the memory of one host (shm).
	SharedMemory
)

func (m Medium) String() string {
	switch m {
	case Network:
		return "network"
	case SharedMemory:
		return "shared memory"
	}
	return fmt.Sprintf("Medium(%d)", uint8(m))
}

// The defaults of Timeouts.
//
// FailureTimeout is the one that depends on the medium. Over a network,
// silence has causes other than a stopped peer: lost packets and their
// retransmissions, a congested link, a host's scheduling, each adding to
// the gap between two keepalives (QUIC sends one every third of it, TCP
// heartbeats every quarter); declaring a live peer failed expels it from
// the job, so the network gets 10 s. On shared memory a node-mate's
// heartbeat is a store its own goroutine makes every fifth of it, read
// straight from memory: only the host's scheduler delays it, and a
// node-mate that dies is seen by its pid within milliseconds whatever the
// timeout, so what the timeout bounds is a stopped or hung process alone,
// which 5 s finds twice as fast.
const (
	DefaultTimeout             = 10 * time.Minute // torch.distributed's default
	DefaultConnectTimeout      = 60 * time.Second
	NetworkFailureTimeout      = 10 * time.Second
	SharedMemoryFailureTimeout = 5 * time.Second
)

// DefaultTimeouts are the defaults of a tier on medium m.
func DefaultTimeouts(m Medium) Timeouts {
	d := Timeouts{Timeout: DefaultTimeout, FailureTimeout: NetworkFailureTimeout, ConnectTimeout: DefaultConnectTimeout}
	if m == SharedMemory {
		d.FailureTimeout = SharedMemoryFailureTimeout
	}
	return d
}

// Or is t with each zero field taken from d.
func (t Timeouts) Or(d Timeouts) Timeouts {
	if t.Timeout == 0 {
		t.Timeout = d.Timeout
	}
	if t.FailureTimeout == 0 {
		t.FailureTimeout = d.FailureTimeout
	}
	if t.ConnectTimeout == 0 {
		t.ConnectTimeout = d.ConnectTimeout
	}
	return t
}

// WithDefaults is t with each zero field at its default on medium m.
func (t Timeouts) WithDefaults(m Medium) Timeouts { return t.Or(DefaultTimeouts(m)) }

// Validate says which field of t is negative, or nil.
func (t Timeouts) Validate() error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"Timeout", t.Timeout}, {"FailureTimeout", t.FailureTimeout}, {"ConnectTimeout", t.ConnectTimeout}} {
		if f.d < 0 {
			return fmt.Errorf("%s %v is negative", f.name, f.d)
		}
	}
	return nil
}

// String is t as the Plan prints it: "operation 10m0s, failure 10s,
// connect 1m0s".
func (t Timeouts) String() string {
	return fmt.Sprintf("operation %v, failure %v, connect %v", t.Timeout, t.FailureTimeout, t.ConnectTimeout)
}
