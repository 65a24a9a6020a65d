// Package shm is hiercomm's intra-node CPU communicator: the processes of one
// host run every comm.Communicator operation over shared memory, the CPU
// counterpart of NCCL's role in the hierarchy. New attaches one process as a
// rank; NewLocal makes every rank of a world in one process (goroutines,
// each with its own mapping), for tests and simulations.
//
// What lives where:
//
//   - config.go: Config, its defaults and checks.
//   - layout.go, segment.go: one segment file per communicator in /dev/shm
//     (hiercomm-<Namespace>-world, and a hashed name per Split child) and
//     where everything sits in it; creation without a name (O_TMPFILE) and a
//     link once initialized, stale-file detection, attach, and the unlink
//     once every rank has mapped it, after which a crash leaks nothing.
//   - sync.go, liveness.go: the step protocol (per-rank step counters, two
//     parts per slot, one wait per step: spin, then yield when a peer
//     behind may need this CPU, then futex) and failure detection (pid,
//     heartbeat, a peer's closed or aborted state).
//   - exec.go, step.go: the executor that runs collectives in the order
//     they were started, and the header step that opens every collective
//     (but an eager Broadcast or Scatter: eager.go) with its sequence number,
//     Signature and status.
//   - reduce.go, move.go: the schedules: direct AllReduce, Reduce and
//     ReduceScatter (each rank reduces its own slice from everyone's staged
//     input), Scan and ExScan, staged Broadcast, AllGather, Gather, Scatter,
//     AllToAll and AllToAllV; eager.go: eager small Broadcasts and Scatters
//     (the root writes a slot and returns). copy.go: how they move bytes (steps sized for
//     the caches, staging copies that stay in them, non-temporal stores
//     for the results of large collectives).
//   - grow.go: Grow and Join, newcomers of this host taken in (a fresh
//     segment in a new namespace; the steps are tier.Growth's).
//   - split.go: Split; p2p.go, p2pengine.go, ring.go: Send and Recv over a
//     ring per ordered pair of ranks.
//   - sys_linux.go, sys_other.go: the system calls; elsewhere New returns an
//     error and the package still builds. arch_amd64.go/.s: non-temporal
//     copies and the CPU a rank runs on; arch_other.go their portable
//     stand-ins (copy, unknown).
//
// Failures follow the comm contract, as nexar does. A bad argument on one
// rank, or a context that ended before the rank began, is known to every
// rank at the header step: that rank gets its *comm.ArgError (or ErrTimeout,
// ErrCanceled), the others a *comm.RemoteError, and the communicator goes
// on. A mismatch is a *comm.MismatchError on every rank, and aborts the
// communicator. Anything that ends a collective after this rank's header
// said go (its context ending mid-way, a peer that dies, hangs or closes)
// aborts the communicator, since the ranks may no longer agree on the next
// step: the peers learn it from this rank's abort record at once, a dead
// peer is named by every survivor (*comm.PeerError) within FailureTimeout,
// and later calls fail fast with comm.ErrAborted. An eager Broadcast's
// root returns before its readers read (a local completion, as MPI
// allows): their failure there, a mismatch included, reaches it at its
// next call (eager.go).
//
// shm imports comm, comm/schedule (Config.Cost) and internal/hoptrace of
// hiercomm, and the standard library (syscall for mmap, futex, kill and
// linkat; no cgo); never another tier (internal/rules/imports_test.go). Nothing in a segment is a Go pointer: the
// garbage collector does not know the mapping, and other processes could
// not use one anyway. Shared words are read and written with sync/atomic at
// aligned offsets; staged data with plain copies, published by the atomic
// store of a step counter.
package shm
