package shm

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/hiercomm/hiercomm/comm/schedule"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// Config configures one rank of a shared-memory communicator. It is copied
// by New, never modified in the caller's hands.
type Config struct {
	// Namespace names the job and communicator on this host: segment files
	// are /dev/shm/hiercomm-<Namespace>-*. Every rank of one communicator
	// uses the same value; concurrent jobs must use different ones
	// (hiercomm.Init derives it from the job id, a hash of the job key and
	// the host id). Letters, digits, '.', '_', '-' only, 1..100 bytes. Required.
	Namespace string
	// Rank in [0, Size); Size >= 1.
	Rank, Size int
	// Name names the communicator in its errors, logs and flight
	// recorder's dump (a Split child is named after it: "node 1
	// shm/split#1(color 0)"). If empty, "world". hiercomm.Init names a
	// node's part of a hierarchy as the hierarchy's errors name it: "node
	// 1 shm".
	Name string
	// Ranks, if set, are the whole job's ranks of this communicator's
	// ranks (Ranks[r] is rank r's; Size of them): a part of a composed
	// communicator, such as a node's part of a hierarchy (hiercomm.Init
	// sets the node's ranks). Logs and the flight recorder's dump then
	// name this process by its job rank first, then its rank here
	// (rank=3 local=1), and an abort record in which the composer blames
	// this process's job rank blames this rank. If nil, this
	// communicator's ranks are the job's.
	Ranks []int
	// SlotBytes is each rank's staging area in the segment. If zero, 4 MiB.
	// Rank 0's value is the one used: the others take it from the segment.
	// At least 8 KiB. A step carries at most half a slot of a rank's
	// message (and at most 512 KiB, which the caches favour): slots below
	// 1 MiB mean more steps for large messages.
	SlotBytes int
	// Timeout, FailureTimeout and ConnectTimeout are the bounds every
	// tier takes (tier.Timeouts, where their meaning and defaults are
	// written once), on shared memory (Config.Timeouts gives them with
	// their defaults).
	//
	// Timeout bounds each operation whose context has no earlier
	// deadline. If zero, DefaultTimeout (10m).
	Timeout time.Duration
	// FailureTimeout: how long a peer may be unresponsive (its process gone,
	// or its heartbeat stopped) before it is declared failed. Every rank
	// must use the same (a rank's heartbeat goes at a fifth of its own).
	// If zero, DefaultFailureTimeout (5s). A process that is gone is
	// usually seen much sooner, by its pid.
	FailureTimeout time.Duration
	// ConnectTimeout bounds New: all Size ranks must attach within it. If
	// zero, DefaultConnectTimeout (60s).
	ConnectTimeout time.Duration
	// Logger receives the communicator's logs. If nil, slog.Default().
	Logger *slog.Logger
	// FlightRecorder, if positive, makes every communicator keep its last
	// FlightRecorder collectives (tier.FlightRecorder, with the node-mates
	// each waited on) and write them to Logger at its first deadline,
	// abort, mismatch or peer failure, as nexar.Options.FlightRecorder. If
	// zero, nothing is recorded.
	FlightRecorder int

	// Tuning of the schedules (see copy.go and reduce.go for what each
	// trades and how the defaults were measured). The zero value of each
	// is its default.

	// StepBytes bounds the bytes of its message that one rank moves
	// through one step, so that what a rank stages is still in a cache
	// when its peers read it. If zero, DefaultStepBytes. The creator of a
	// segment (rank 0, or the first member of a Split's group) decides:
	// the others take its value from the segment.
	StepBytes int
	// EagerBytes is the largest Broadcast (or Scatter, every rank's block
	// together) that goes eager (eager.go): its root copies the message
	// into one of its eagerSlots slots and returns, without waiting for
	// the readers, who copy it out when they come; back-to-back broadcasts
	// pipeline through the slots. A Reduce (or a Gather, of each rank's
	// block) of at most as much goes eager the other way: every rank but
	// the root copies its part into a slot and returns, and the root
	// reduces (gathers) them when it comes. If zero,
	// DefaultEagerBytes; negative: no eager collectives. It is capped at
	// SlotBytes/64, so a rank's eagerSlots large slots take at most a
	// quarter of what its staging slot does (its small slots, for
	// messages up to eagerSmall bytes, take 32 KiB). The creator of a segment decides, as for StepBytes:
	// the others take its value from the segment, so every rank chooses
	// the same schedule for the same call. A communicator that is a part
	// of a composed one must not go eager (set it negative, as
	// hiercomm.Init does for a hierarchy's nodes): a composer refuses a
	// part's call without its buffers (tier.WithoutBuffers) once the
	// collective failed elsewhere, and the refusing rank, its call empty,
	// would take the staged way where its peers take the eager one.
	EagerBytes int
	// Cost is the α-β model (a Direct one: Latency is a step's, BytesPerSec
	// the copy rate) that chooses whether an AllReduce or Reduce takes one
	// step, in which every rank (the root, for Reduce) reduces the whole
	// message from every rank's part, or the direct algorithm's two
	// (schedule.CostModel.OneStepReduce). Its zero fields take
	// DefaultCost's. Every rank of a communicator must use the same model
	// (it chooses the algorithm).
	Cost schedule.CostModel
	// SmallReduceBytes, if set, is the switch Cost would compute, given
	// (Config.OneStepReduce, the one decision, takes it as its input):
	// positive, one step up to this many bytes from all ranks together
	// (the message's size × Size); negative, two steps always. Zero: Cost
	// decides. Either way only what fits half a slot takes one step.
	// Every rank of a communicator must use the same value.
	SmallReduceBytes int
	// NonTemporalBytes: from this many bytes of results over all ranks, a
	// collective writes its results with non-temporal stores, around the
	// caches (they would not hold them). If zero,
	// DefaultNonTemporalBytes; negative: never. A rank's own choice: ranks
	// may differ.
	NonTemporalBytes int
	// HostProcs is how many processes share this host's CPUs, this
	// communicator's ranks and any others (an emulated cluster's other
	// nodes; hiercomm.Init passes launchenv.Launch.HostProcs). If zero, this
	// communicator's ranks. With more processes than CPUs, a waiting rank
	// checks only a few times before it yields, and yields for
	// yieldCrowded instead of yieldFor before it sleeps: a spinning or
	// yielding rank takes CPU time from the processes that have work (a
	// QUIC transport, on 2 cores with 4 processes, lost a third of its
	// small-message speed to it). A rank's own choice: ranks may differ.
	HostProcs int
}

// DefaultCost is shm's cost model, fitted to what was measured on a
// 2-core host with 2 and 4 processes: one step faster up to 16 KiB
// messages on 4 ranks (2–7 µs against 3–10), two steps from 32 KiB, and
// one step as fast at 32 KiB on 2 ranks. A step of 4 µs, 8 GB/s to copy
// and 6 GB/s to reduce data in cache (a reduction reads two streams for
// each one it writes) put the switch at about 14 KiB per message on 4
// ranks, 4 KiB on 8 and 190 KiB on 2.
var DefaultCost = schedule.CostModel{Latency: 4 * time.Microsecond, BytesPerSec: 8e9, ReduceBytesPerSec: 6e9, Direct: true}

// Defaults of Config's zero fields.
const (
	DefaultSlotBytes      = 4 << 20
	DefaultTimeout        = tier.DefaultTimeout
	DefaultFailureTimeout = tier.SharedMemoryFailureTimeout // tier.DefaultTimeouts(tier.SharedMemory)
	DefaultConnectTimeout = tier.DefaultConnectTimeout
	// Measured on 2 cores (AllReduce, AllGather, Broadcast at 1–16 MiB, 2
	// and 4 ranks): 512 KiB steps are as fast as any size from 256 KiB to
	// 1 MiB and faster than 128 KiB or a whole part.
	DefaultStepBytes = 512 << 10
	// Measured on 2 cores: a 4 MiB AllReduce on 2 ranks (8 MiB of results,
	// in cache) is faster with ordinary stores, on 4 ranks (16 MiB) and a
	// 16 MiB one on 2 ranks with non-temporal ones.
	DefaultNonTemporalBytes = 16 << 20

	// Measured on 2 cores, 4 processes (hiercomm-bench, the slowest
	// rank's time): an eager Broadcast of 32 KiB took 6 µs and one of
	// 64 KiB 9.5 µs, against 14–17 and 16–19 staged; at 128 KiB both
	// took 20–25 µs. 64 KiB keeps the eager slots at a quarter of the
	// default staging slot.
	DefaultEagerBytes = 64 << 10

	minSlotBytes  = 8 << 10
	maxEagerBytes = 1 << 20
	maxSize       = 4096
)

// withDefaults returns a copy of c with its zero fields filled, or an error
// naming the first field that is wrong.
func (c Config) withDefaults() (Config, error) {
	if c.SlotBytes == 0 {
		c.SlotBytes = DefaultSlotBytes
	}
	t := c.Timeouts()
	c.Timeout, c.FailureTimeout, c.ConnectTimeout = t.Timeout, t.FailureTimeout, t.ConnectTimeout
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Name = cmp.Or(c.Name, "world")
	c.Ranks = slices.Clone(c.Ranks)
	c.StepBytes = cmp.Or(c.StepBytes, DefaultStepBytes)
	c.EagerBytes = cmp.Or(c.EagerBytes, DefaultEagerBytes)
	c.Cost = c.Cost.Or(DefaultCost)
	c.NonTemporalBytes = cmp.Or(c.NonTemporalBytes, DefaultNonTemporalBytes)
	if err := checkNamespace(c.Namespace); err != nil {
		return c, err
	}
	switch {
	case c.Cost.Validate() != nil:
		return c, fmt.Errorf("shm.Config: Cost: %w", c.Cost.Validate())
	case c.Size < 1 || c.Size > maxSize:
		return c, fmt.Errorf("shm.Config: Size %d is outside [1, %d]", c.Size, maxSize)
	case c.Rank < 0 || c.Rank >= c.Size:
		return c, fmt.Errorf("shm.Config: Rank %d is outside [0, Size %d)", c.Rank, c.Size)
	case c.Ranks != nil && len(c.Ranks) != c.Size:
		return c, fmt.Errorf("shm.Config: Ranks has %d ranks, Size is %d", len(c.Ranks), c.Size)
	case c.SlotBytes < minSlotBytes:
		return c, fmt.Errorf("shm.Config: SlotBytes %d is below the minimum %d", c.SlotBytes, minSlotBytes)
	case c.FlightRecorder < 0:
		return c, fmt.Errorf("shm.Config: FlightRecorder %d is negative", c.FlightRecorder)
	case t.Validate() != nil:
		return c, fmt.Errorf("shm.Config: %w", t.Validate())
	case c.StepBytes < 0:
		return c, fmt.Errorf("shm.Config: StepBytes %d is negative", c.StepBytes)
	case c.EagerBytes > maxEagerBytes:
		return c, fmt.Errorf("shm.Config: EagerBytes %d is above the maximum %d", c.EagerBytes, maxEagerBytes)
	case c.HostProcs < 0:
		return c, fmt.Errorf("shm.Config: HostProcs %d is negative", c.HostProcs)
	}
	// Whole cache lines per half slot, so that every part starts aligned for
	// every dtype and two ranks never write the same line.
	c.SlotBytes &^= 2*lineBytes - 1
	return c, nil
}

// Timeouts are the bounds a communicator made with c keeps, in the
// vocabulary every tier shares: Timeout, FailureTimeout and
// ConnectTimeout, each zero one at its default on shared memory.
func (c Config) Timeouts() tier.Timeouts {
	return tier.Timeouts{Timeout: c.Timeout, FailureTimeout: c.FailureTimeout, ConnectTimeout: c.ConnectTimeout}.WithDefaults(tier.SharedMemory)
}

// eagerBytes is the EagerBytes a segment made with c gets: 0 (none) when
// EagerBytes is negative, at most SlotBytes/(4·eagerSlots).
func (c Config) eagerBytes() int {
	return max(0, min(c.EagerBytes, c.SlotBytes/(4*eagerSlots)))
}

// checkNamespace accepts 1..100 bytes of letters, digits, '.', '_' and '-',
// so that a namespace is a safe piece of a file name.
func checkNamespace(ns string) error {
	if len(ns) == 0 || len(ns) > 100 {
		return fmt.Errorf("shm.Config: Namespace %q must be 1 to 100 bytes", ns)
	}
	for i := 0; i < len(ns); i++ {
		b := ns[i]
		ok := b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-'
		if !ok {
			return fmt.Errorf("shm.Config: Namespace %q has %q at byte %d; use letters, digits, '.', '_' and '-' only", ns, b, i)
		}
	}
	return nil
}
