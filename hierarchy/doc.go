// Package hierarchy is hiercomm's 2D communicator: a comm.Communicator
// composed of an intra-node communicator (NCCL between the GPUs of a node,
// shared memory between the processes of a CPU node, or any Communicator)
// and an inter-node one per rail (local rank l of every node), over a
// topology.Topology that says which rank is where.
//
// It never builds a transport: New takes its parts as values, and Build
// makes the intra and rail parts by splitting a flat world communicator
// (which also carries Send/Recv between nodes and the operations that have
// no 2D algorithm). The root package wires nexar (world and rails) and shm
// (intra) into it; tests wire in-memory worlds.
//
// # Algorithms
//
// With N nodes of G ranks each (homogeneous), global rank r = (node m,
// local l), and rail l the ranks with local rank l in node order:
//
//   - AllReduce, large: intra ReduceScatter → every rail allreduces its 1/G
//     shard across nodes (all G rails at once) → intra AllGather, pipelined
//     in chunks so the intra and inter tiers overlap. The count is split
//     into a part divisible by G and a tail of fewer than G elements, which
//     takes the small path: exact for every count.
//   - AllReduce, small: intra Reduce to the lead → the leads allreduce →
//     intra Broadcast. Which messages are small is one decision,
//     Config.Switch, made when the communicator is made: the cost model's
//     (Config.Cost, schedule.Hierarchy: the leads route below its Switch
//     size), with Config.SmallBytes, where it is set, as the switch given
//     to it. Every rank picks the same path: the choice depends
//     on the count and the Config only, and Build checks that every rank
//     was given the same.
//   - ReduceScatter: a local permutation puts the blocks of rail l's ranks
//     together, an intra ReduceScatter leaves local rank l the node's sum of
//     those N blocks, and a ReduceScatter on rail l hands every rank its own
//     block. The inter-node tier carries (N-1)/N of one block per rank:
//     no AllReduce underneath.
//   - AllGather: the inverse (rail AllGather, intra AllGather, permutation).
//   - Broadcast, large: the root's node scatters the message over its
//     ranks, every rail broadcasts its piece across nodes, every node
//     AllGathers; small: the world part's Broadcast (its tree crosses nodes
//     first, and back-to-back calls pipeline).
//   - Reduce: intra ReduceScatter → rail Reduce to the root's node → intra
//     Gather to the root (large); intra Reduce → rail Reduce (small).
//   - Barrier: intra, leads, intra.
//   - Send/Recv go directly: through the intra part to a rank of this node,
//     through the world to another node's.
//   - AllToAll: an intra AllToAll gathers on local rank l every block the
//     node sends to rail l's ranks, an AllToAll on rail l delivers them (the
//     MoE exchange: N-1 inter-node messages of G blocks per rank instead of
//     (N-1)·G of one).
//   - Gather: intra Gather at the root's local rank lr, Gather on rail lr
//     at the root's node, a permutation at the root; Scatter the inverse.
//     The other rails take part with empty buffers.
//   - AllToAllV: an intra AllToAll of the counts, an intra AllToAllV that
//     gathers on local rank l the node's blocks for rail l, an AllToAllV on
//     rail l whose messages start with the counts they carry (a receiver
//     whose RecvCounts disagree reports a mismatch naming the sender).
//   - Scan, ExScan (node-major ranks; else on the world): intra Scan
//     (ExScan), an ExScan of the node totals on the last rail, an intra
//     Broadcast of the nodes' prefix, and a local combine.
//   - Heterogeneous nodes (different G): AllReduce, Broadcast and Reduce
//     take lead-based paths for every size, Barrier the same three phases;
//     the other collectives run on the world communicator. Both are exact.
//
// Avg runs as Sum through the phases and is divided once at the end, so it
// rounds once, as on a flat communicator.
//
// # Memory
//
// The caller's buffers are host memory or device memory, as the Stager
// (Config.Stager) allows: NewHostStager's serves host memory, for shm or
// nexar parts; on a GPU cluster the intra part is an nccl.Comm, the world
// and rails are nccl.Staged and the Stager an nccl.Stager, and buffers are
// device memory. The phases hand the parts the caller's buffers, slices
// of them, and scratch buffers the Stager allocates in the same memory;
// the local steps (permutations, Scan's combine, Avg's division) are the
// Stager's. Nothing here reads or writes a buffer's bytes itself: the few
// values the algorithms compute on the host (AllToAllV's counts and
// per-node headers) go in and out through Stager.Write and Stager.Read.
// Buffers in memory the Stager cannot serve are a bad argument (an
// *comm.ArgError on the rank that passed them, comm.ErrPeerAbandoned on
// the others), Send and Recv included. Split gives each child a Stager
// of its own (Config.NewStager), because a child's collectives run beside
// its parent's. The world part also carries Split's exchange of colors
// and keys in host memory, so it must accept host buffers (nccl.Staged
// does).
//
// # Failures
//
// A collective is a fixed sequence of operations on the parts, the same on
// every rank for the same call, so the parts' sequence numbers never
// diverge. A bad argument on one rank is an *comm.ArgError there; that rank
// still issues every operation of the sequence, each with arguments its
// part rejects, so each part tells its peers (comm.ErrPeerAbandoned) and
// they do the same for the rest of the sequence (tier.Phase.Refused
// carries the refusing rank's reason to them): every rank of the
// hierarchy returns in bounded time and the communicator stays usable.
// Anything else (a mismatch, a deadline, a dead peer, a closed part) aborts
// the hierarchy: every part is aborted (comm.Control's Abort), which tells
// its peers, so every rank of every part learns of it; a part aborted by
// a peer's news of a failure, a deadline or a cancel aborts the hierarchy
// in turn (comm.Control's Aborted), once the collective in progress, if
// any, has ended — or at once, for a deadline or a cancel, when the census
// finds a rank that stopped in that collective or before it.
// A deadline names the ranks that had not started the collective,
// whichever part they are in: the hierarchy asks every rank over its world
// part (comm.Control's census). A collective that has waited longer than
// the cost model expects (Config.AskAfter plus four times its time) asks
// the same census which calls every rank made, so calls whose routes never
// meet in a part (a small Broadcast through the world part against an
// AllReduce through the nodes and rails) are a *comm.MismatchError on
// every rank within a second or two, naming the first collective that
// differs (census.go; the rules are tier.Watch's). A mismatch is reported as a
// *comm.MismatchError whose Local is the caller's own call; a rank's failure as a
// *comm.PeerError naming its global rank (comm.OpError.Culprit), whichever
// part the news came through. After a failure, Shrink
// gives the survivors a new hierarchy on their recomputed topology; Grow
// (with Join on the newcomers) takes newcomers into a hierarchy built
// standalone, composed as Shrink composes the shrunk one (grow.go).
//
// hierarchy imports comm, comm/schedule (Config.Cost), topology and
// internal/hoptrace; never a tier: its parts come as comm.Communicators
// (internal/rules/imports_test.go).
package hierarchy
