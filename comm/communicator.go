package comm

import (
	"context"
)

// Communicator is a group of ranks that run collectives together.
//
// Every rank must start the same collectives in the same order (Send and Recv
// are matched by peer and tag instead). A call whose arguments other ranks
// disagree with ends with a *MismatchError on every rank that takes part in
// it, and aborts the communicator; a rank whose part only sent may have
// finished first and gets the mismatch from its next call. A deadline or
// cancel of ctx on any rank ends the collective on every rank with an
// error; a peer that dies makes every call in flight and every later call
// fail (ErrAborted). Arguments that are wrong on their own (lengths, roots,
// dtypes) are an *ArgError on the rank that made them; the call still takes
// its place in the order, and the others are told, so no one waits forever.
//
// Results: send buffers are never written (but in place, where the send is
// the recv); every element of a recv buffer is written; data-moving
// collectives are bit-exact, and a reducing collective gives every rank the
// same bits. Scan is inclusive; ExScan gives rank 0 the op's identity (0 for
// sum, premulsum, bor and bxor, 1 for prod, +Inf or the type's maximum for
// min, −Inf or its minimum for max, all ones for band; tier.FillIdentity).
// Messages from one sender with one tag are received in the order
// they were sent; messages with different tags may be received in any
// order; a Recv whose buffer differs in dtype or length from the message is
// a mismatch error on the receiver.
//
// Methods may be called from several goroutines; the order in which
// collectives are started is their order on the communicator, so concurrent
// callers must agree on that order themselves (as with NCCL streams).
type Communicator interface {
	// Rank is this process's index in [0, Size).
	Rank() int
	// Size is the number of ranks.
	Size() int

	// Start begins the operation c and returns at once; the sequence number
	// of a collective is fixed by the order of Start calls. ctx bounds the
	// whole operation, not just the call to Start.
	Start(ctx context.Context, c Call) *Work

	// The blocking forms; each is Start(ctx, Call{...}).Wait(). See Call for
	// the buffer layout of each.
	AllReduce(ctx context.Context, send, recv Buffer, op ReduceOp) error
	Broadcast(ctx context.Context, buf Buffer, root int) error
	Reduce(ctx context.Context, send, recv Buffer, op ReduceOp, root int) error
	AllGather(ctx context.Context, send, recv Buffer) error
	ReduceScatter(ctx context.Context, send, recv Buffer, op ReduceOp) error
	AllToAll(ctx context.Context, send, recv Buffer) error
	AllToAllV(ctx context.Context, send Buffer, sendCounts []int, recv Buffer, recvCounts []int) error
	Gather(ctx context.Context, send, recv Buffer, root int) error
	Scatter(ctx context.Context, send, recv Buffer, root int) error
	Scan(ctx context.Context, send, recv Buffer, op ReduceOp) error
	ExScan(ctx context.Context, send, recv Buffer, op ReduceOp) error
	Send(ctx context.Context, buf Buffer, peer, tag int) error
	Recv(ctx context.Context, buf Buffer, peer, tag int) error
	Barrier(ctx context.Context) error

	// Split is a collective that partitions the ranks by color; within a
	// color, ranks are ordered by key, then by their rank here. A rank that
	// passes NoColor takes part but gets (nil, nil). The new communicator has
	// its own sequence space and never cross-talks with this one or its
	// siblings; it can do everything this one can.
	Split(ctx context.Context, color, key int) (Communicator, error)

	// Shrink gives the survivors of a failure a new communicator without
	// the ranks that failed, as ULFM's MPI_Comm_shrink and NCCL's
	// ncclCommShrink do.
	//
	// Shrink is called by every surviving rank (ranks that this one knows
	// failed need not, and cannot). The survivors agree on the set of
	// failed ranks — also when they learned of different failures, and
	// when a further rank fails during the agreement — and each gets a new
	// communicator of the others, ranked in the order of their ranks
	// here. Every survivor that returns without error has the same
	// members; the new communicator's collectives are exact. With no rank
	// failed, the result is a copy of the whole group (a new communicator
	// with its own sequence space), as MPI_Comm_shrink gives; this
	// communicator is then left as it was.
	//
	// Shrink ends in bounded time: a peer that has not joined the
	// agreement by ctx's deadline (or, without one, by the communicator's
	// own timeout for a collective) makes it fail on every rank with an
	// error naming it; it is not taken for failed, since it may be alive
	// and merely late. A failure during the agreement that not every
	// survivor saw in time may leave that rank in the new communicator:
	// its first collective then fails with the failure, and a second
	// Shrink removes the rank. So may a rank whose ctx ends after it
	// joined the agreement: its Shrink fails while the others may have
	// decided with it; it should exit, which the others' next collective
	// reports.
	//
	// This communicator stays aborted by the failure; Close it after
	// Shrink (the new communicator does not depend on it staying open).
	// Communicators Split from this one are not shrunk: Split the new one
	// again. A communicator that cannot shrink returns an error wrapping
	// ErrCannotShrink.
	Shrink(ctx context.Context) (Communicator, error)

	// Close releases this rank's resources. Operations in flight fail with
	// ErrClosed; later calls fail fast with ErrClosed.
	Close() error

	Control
}

// Control is the side of a communicator that is not a collective: how it
// is aborted and says that it was, how an outside failure detector tells
// it of a dead peer, and the progress census a communicator composed of
// others asks over it. Every Communicator implements it (a Communicator
// embeds it), so a communicator composed of others (hierarchy) and a
// decorator (Wrap) reach every capability of their parts without type
// assertions, and none is lost by wrapping.
type Control interface {
	// Abort fails the operations in flight with cause, makes every later
	// call fail fast with it (*AbortedError), and tells every live peer,
	// whose communicator is aborted in turn with a *RemoteError that
	// keeps cause's kind (errors.Is with ErrMismatch, ErrTimeout,
	// ErrCanceled and ErrPeerFailed holds there as here). A communicator
	// composed of others (hierarchy) aborts its parts this way when one
	// of them fails, so that every rank of every part learns of it in
	// bounded time. Calls after the first change nothing; so does a call
	// after Close.
	Abort(cause error)

	// Aborted returns a channel that is closed once the communicator is
	// aborted — by a failure it saw, by a peer's news, or through Abort —
	// and AbortCause is then the failure that aborted it (nil before). A
	// communicator composed of others watches it to abort the others:
	// news that reaches a rank through one part ends what would wait on
	// another (a node-mate of a dead rank may be waiting in the
	// intra-node part while a rail brings the news).
	Aborted() <-chan struct{}
	AbortCause() error

	// PeerFailed tells the communicator that an outside failure detector
	// (the cluster layer's membership) declared the process of rank dead:
	// its operations waiting on that rank, and every later one, fail with
	// a *PeerError naming it, instead of waiting for the transport to
	// notice. rank is a rank of the world the communicator was made from
	// (for a Split child, of its parent's world); reports of this
	// process's own rank, of ranks out of range, and repeated reports
	// change nothing.
	PeerFailed(rank int, cause error)

	// The progress census. A communicator composed of others asks it over
	// the part that has every rank (a hierarchy's world part), outside
	// any collective, to learn where each rank's composed communicator
	// stands (Progress: its last started collective and the user's calls
	// of the latest ones): when a collective has waited longer than it
	// should (tier.Judge finds a mismatch of calls that took different routes,
	// which no part saw) and when one passes its deadline (its error then
	// names the ranks that had not started the collective, *LateError,
	// however many parts away they stood from the rank that waited).
	//
	// SetProgress installs what this rank answers: its composed
	// communicator's Progress. f must not block. It installs nothing (ok
	// false) when another composed communicator's is installed (two built
	// over one world part would answer for each other) or when the
	// communicator carries no census (see each implementation); remove
	// uninstalls f.
	SetProgress(f func() Progress) (remove func(), ok bool)
	// Progress asks every rank, and returns the answers that arrived by
	// the time every rank had replied or ctx ended; answered[r] is false
	// for a rank that did not answer (stopped, cut off, with nothing
	// installed, or on a communicator that carries no census).
	Progress(ctx context.Context) (answers []Progress, answered []bool)
	// Announce tells every rank this rank's Progress p without being
	// asked; each keeps it and, once this rank no longer answers (it
	// closed or died), counts it as this rank's answer. A composed
	// communicator announces when it finds a mismatch, so that ranks
	// which learn of it later still see the call this rank made.
	Announce(p Progress)
}

// NoColor is the Split color of a rank that wants no new communicator.
const NoColor = -1

// Starter is the one method every Start form (StartAllReduce, …) needs of a
// communicator.
type Starter interface {
	Start(ctx context.Context, c Call) *Work
}
