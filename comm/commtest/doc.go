// Package commtest is the conformance suite that every comm.Communicator
// implementation must pass: nexar (QUIC, TCP and in-memory), shm, nccl and
// the hierarchical communicator.
//
// # Rank-local
//
// Every suite is rank-local: each rank runs the same list of cases, builds
// every rank's input deterministically from (case, rank, index), computes the
// expected result for its own rank with its own sequential reference (float64
// and integer arithmetic, independent of comm's kernels), runs the operation
// and compares. Nothing passes between ranks but through the communicator
// under test, so the same suite runs N goroutines in one process or N
// processes on N hosts. Every rank of a world must call a suite with the
// same Options.
//
// The entry points come in pairs: a rank-local function that returns an error
// naming the failed cases, for one process of a multi-process test, and a
// testing wrapper that runs it on every rank of an in-process world:
//
//	RunRank          / Run             every collective × dtype × op × count
//	P2PRank          / RunP2P          Send and Recv: tags, order, self, sizes
//	NonBlockingRank  / RunNonBlocking  several Starts in flight, waited in reverse
//	SplitRank        / RunSplit        Split, children used alongside the parent
//	BadInputRank     / RunBadInput     one rank's bad argument, the others told
//	MismatchRank     / RunMismatch     ranks that disagree all get a MismatchError
//	MismatchMatrixRank / RunMismatchMatrix  every pair of kinds, one rank odd
//	FaultsRank       / RunFaults       a rank canceled, late, closed or aborted
//	FusedRank        / RunFused        comm.AllReduceFused over many buffers
//	BatchRank        / RunBatch        comm.Batch: collectives and Send/Recv as one unit
//	GrownRank        / RunGrow         a tier's Grow: every process at its rank, then Run
//	                   RunGrowFailure  a failed Grow: every member's error, the old one exact
//
// # Data
//
// Inputs are distinct across ranks and across indices, so a result that lands
// in the wrong place (a ReduceScatter that hands rank r block r+1, a
// hierarchical AllReduce that reduces only one shard across nodes) is wrong
// somewhere. Values are chosen so that the exact result does not depend on the
// order of reduction: small multiples of 1/4 for Sum and Avg (inside the
// range where every partial sum is exact in the dtype), ±1/2, ±1, ±2 for a
// floating-point Prod, arbitrary finite values for Min and Max, arbitrary bits
// for integers (Sum and Prod wrap, two's complement) and for the collectives
// that only move data (which must move bits exactly, NaN payloads included).
// Results are compared bit for bit; where the reference is NaN any NaN is
// accepted. Extra cases put NaN on one rank at some indices, and reduce
// random floats (not exact) to check that every rank gets the same bits.
//
// # What the suite holds implementations to
//
// Beyond the layouts in comm.Call, the suite checks these rules, which it
// takes as part of the contract:
//
//   - Scan is inclusive: rank r gets the reduction of ranks 0…r.
//   - ExScan is exclusive: rank r gets the reduction of ranks 0…r-1, and rank
//     0 gets the identity of the op: 0 for Sum, 1 for Prod, +Inf (integer
//     types: the largest value) for Min, −Inf (the smallest value) for Max.
//   - Avg is the exact sum divided by the size, rounded once to the dtype
//     (nearest, ties to even).
//   - Send buffers are never written (except where the call is in place), and
//     every element of a receive buffer is written.
//   - Send and Recv match by (peer, tag); messages with the same peer and tag
//     arrive in the order their Sends were started (non-overtaking); messages
//     with different tags can be received in any order; a rank can send to
//     itself; Start of a Send or Recv does not wait for the peer.
//   - A bad argument on one rank is an *comm.ArgError there (named as
//     tier.Validate names it) and an error that wraps comm.ErrPeerAbandoned
//     on every other rank of the collective, after which the communicator
//     still works.
//   - Ranks that disagree on a collective all get a *comm.MismatchError whose
//     Local is their own call's Signature.
//   - A rank whose context is canceled or past its deadline, that closes
//     or aborts its communicator, or that starts a collective after the
//     others' deadline passed, ends the collective on every rank: each
//     gets an error that says what happened (comm.ErrCanceled,
//     comm.ErrTimeout, comm.ErrPeerFailed, a *comm.LateError) and names
//     that rank, within Options.Timeout (FaultsRank).
//
// # Robustness
//
// Every case runs under Options.Timeout. A Communicator must end an
// operation when its context ends; if one is still running a little after
// (half the timeout, between 1 and 10 seconds), the suite reports it as hung
// and stops instead of hanging itself. Errors list at most a dozen failed
// cases, each with the first wrong index, the value got and the value wanted.
// Each suite's summary line (Options.Log) names its slowest case and the
// share of Options.Timeout it took, so a passing run shows how much room a
// slower or busier machine (CI, the race detector) has before a case times
// out.
//
// # Memory
//
// Buffers are Go memory unless Options.Memory places them elsewhere (device
// memory for a GPU communicator). Within one process the ranks share what
// they compute (every rank's input, and the expected results that several
// ranks need), for the last few cases only.
//
// # Cost
//
// Counts at or above Options.LargeCount run only for a representative subset
// of dtype × op unless Options.FullLarge is set. With the default options
// and 8 ranks in one process the suite's own work (building inputs and
// expected results, checking) is about 20 s of CPU time, nearly all of it in
// the 1000003-element cases; the communicator's time comes on top. Under
// the race detector, trim Counts (e.g. {0, 1, 7, 4099}).
//
// commtest imports comm and the standard library only, so every
// implementation's tests can import it.
package commtest
