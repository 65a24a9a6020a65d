package nexar

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/hiercomm/hiercomm/comm/schedule"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// Options tune a nexar communicator. The zero value gives the defaults;
// every rank of a world must use the same Options (the algorithm choice is
// computed from them on every rank and must come out the same).
type Options struct {
	// Timeout bounds a collective whose context has no earlier deadline,
	// and each Recv. A Send returns once its frames are handed to the
	// transport, which blocks only while the peer's window is full; a
	// peer that stops reading is failed within the transport's
	// FailureTimeout. It is tier.Timeouts.Timeout, the operation's bound
	// in every tier. If zero, defaults to DefaultTimeout (10 minutes, as
	// torch.distributed's default).
	Timeout time.Duration
	// ProbeAfter is how long a rank waits for a peer's frame before asking
	// that peer which collective it is in, so mismatched calls that move no
	// data towards each other are detected rather than waiting for Timeout.
	// If zero, defaults to 1 s.
	ProbeAfter time.Duration
	// Spin is how long a receive — a collective's, a Recv, the Wait of a
	// started Recv — reads its peer's connections itself, yielding the
	// processor between tries, before it sleeps until its frame comes
	// (the progress engine: pump.go; over TCP, other transports always
	// sleep). It counts from the last byte that came from the peer, so a
	// receive whose frame is still arriving keeps reading it rather than
	// sleeping through it. Negative: never spin. If zero,
	// defaults to the cost model's Latency (α: a frame in flight comes
	// within about that; a longer wait is a peer still computing, better
	// slept through), or to no spin when this host runs more than twice
	// as many ranks of the world as it has cores (by the transport's
	// addresses), whose spinning would take the cores the others need.
	Spin time.Duration
	// SegmentBytes is the pipelining unit of the large-message schedules
	// (rounded down to whole elements, at most transport.MaxFrame). If
	// zero, defaults to DefaultSegmentBytes (256 KiB).
	SegmentBytes int
	// Cost is the α-β model that picks an algorithm by size and world;
	// each of its zero fields takes its default (schedule.DefaultCost).
	Cost schedule.CostModel
	// Logger receives the communicator's logs. If nil, defaults to slog.Default().
	Logger *slog.Logger
	// FlightRecorder, if positive, makes every communicator keep its last
	// FlightRecorder collectives (tier.FlightRecorder) and write them to
	// Logger at its first deadline, abort, mismatch or peer failure, with
	// the ranks it was left waiting on. If zero, nothing is recorded (and
	// nothing costs anything).
	FlightRecorder int
}

// The defaults of Options.
const (
	DefaultTimeout      = tier.DefaultTimeout
	DefaultSegmentBytes = 256 << 10
)

func (o Options) withDefaults() (Options, error) {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ProbeAfter == 0 {
		o.ProbeAfter = time.Second
	}
	if o.SegmentBytes == 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	o.Cost = o.Cost.WithDefaults()
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch {
	case o.Timeout < 0:
		return o, fmt.Errorf("nexar.Options: Timeout %v is negative", o.Timeout)
	case o.ProbeAfter < 0:
		return o, fmt.Errorf("nexar.Options: ProbeAfter %v is negative", o.ProbeAfter)
	case o.FlightRecorder < 0:
		return o, fmt.Errorf("nexar.Options: FlightRecorder %d is negative", o.FlightRecorder)
	case o.SegmentBytes < 8 || o.SegmentBytes > transport.MaxFrame:
		return o, fmt.Errorf("nexar.Options: SegmentBytes %d is outside [8, %d]", o.SegmentBytes, transport.MaxFrame)
	}
	if err := o.Cost.Validate(); err != nil {
		return o, fmt.Errorf("nexar.Options: %w", err)
	}
	return o, nil
}
