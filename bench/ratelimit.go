package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// Link is a modelled inter-node link of one rank: a rate, and the time up
// to which it is busy. It stands in for a rate-limited NIC when emulated
// links (network namespaces and tbf) are not available: the communicators
// that Wrap returns charge each operation the bytes it sends across nodes
// and complete it no earlier than the link has carried them. Every part
// of one rank that crosses nodes (the flat world, the rail) should share
// one Link, as they would share one NIC. Its methods are safe for
// concurrent use.
type Link struct {
	rate float64 // bytes per second
	now  func() time.Time

	mu        sync.Mutex // guards busyUntil
	busyUntil time.Time

	sent atomic.Int64 // bytes charged so far
}

// NewLink returns a link of bitsPerSecond (the rate tc would be given).
func NewLink(bitsPerSecond uint64) (*Link, error) {
	if bitsPerSecond == 0 {
		return nil, fmt.Errorf("bench.NewLink: a rate of 0 bits/s carries nothing; want a positive rate")
	}
	return &Link{rate: float64(bitsPerSecond) / 8, now: time.Now}, nil
}

// Sent is the number of bytes the link has been charged: the Traffic
// counter of a Spec measured through it.
func (l *Link) Sent() int64 { return l.sent.Load() }

// reserve books n bytes on the link from now and returns when they have
// crossed it: transfers queue behind each other, as on a NIC.
func (l *Link) reserve(n int64) time.Time {
	l.sent.Add(n)
	d := time.Duration(float64(n) / l.rate * float64(time.Second))
	l.mu.Lock()
	defer l.mu.Unlock()
	start := l.now()
	if l.busyUntil.After(start) {
		start = l.busyUntil
	}
	l.busyUntil = start.Add(d)
	return l.busyUntil
}

// Wrap returns c with its inter-node traffic charged to l. local, if not
// nil, says which peers of c are on this rank's node, for Send (a message
// to them costs nothing); nil means every peer is on another node, as on
// a rail. Collectives are charged by ChargedBytes, whose model suits a
// communicator whose every step crosses a node boundary somewhere (a ring
// over the ranks of several nodes is as slow as its slowest link). The
// wrapper is a comm.Wrap decorator: Abort, the aborted signal, an outside
// detector's news and the census reach c, and the communicators that
// Split and Shrink return are charged to the same link, every peer
// counted as remote. It owns nothing more than c: Close closes c.
func (l *Link) Wrap(c comm.Communicator, local func(peer int) bool) comm.Communicator {
	return comm.Wrap(c, &limited{link: l, local: local})
}

// ChargedBytes is what one rank of a communicator of p ranks sends for
// call under a bandwidth-optimal algorithm (nccl-tests' bus factor × the
// size): 2(p−1)/p·n for AllReduce, (p−1)/p of the whole buffer for
// AllGather, ReduceScatter and AllToAll, n for Broadcast, Reduce, Scan and
// ExScan (a pipelined chain), the rank's own block for Gather and Scatter,
// the message for Send, nothing for Recv and Barrier.
func ChargedBytes(call comm.Call, p int) int64 {
	if p < 2 {
		return 0
	}
	frac := func(n int) int64 { return int64(n) * int64(p-1) / int64(p) }
	switch call.Kind {
	case comm.KindAllReduce:
		return 2 * frac(call.Send.ByteLen())
	case comm.KindAllGather:
		return frac(call.Recv.ByteLen())
	case comm.KindReduceScatter, comm.KindAllToAll, comm.KindAllToAllV:
		return frac(call.Send.ByteLen())
	case comm.KindBroadcast, comm.KindScan, comm.KindExScan:
		return int64(call.Recv.ByteLen())
	case comm.KindReduce, comm.KindGather, comm.KindSend:
		return int64(call.Send.ByteLen())
	case comm.KindScatter:
		return int64(call.Recv.ByteLen())
	}
	return 0
}

// limited is the comm.Decorator that charges a communicator's operations
// to a Link.
type limited struct {
	link  *Link
	local func(peer int) bool
}

// Derive charges a communicator made from the wrapped one (by Split or
// Shrink) to the same link, every peer counted as remote.
func (w *limited) Derive(comm.Communicator) comm.Decorator { return &limited{link: w.link} }

// Start starts call on c and completes it when both it and its transfer
// over the link are done.
func (w *limited) Start(ctx context.Context, call comm.Call, c comm.Communicator) *comm.Work {
	n := ChargedBytes(call, c.Size())
	if call.Kind == comm.KindSend && w.local != nil && w.local(call.Peer) {
		n = 0
	}
	sub := c.Start(ctx, call)
	if n == 0 {
		return sub
	}
	until := w.link.reserve(n)
	out := comm.NewWork()
	go func() {
		err := sub.Wait()
		if err == nil {
			if d := time.Until(until); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					err = fmt.Errorf("bench: rate-limited %v: %w", call.Kind, ctx.Err())
				}
			}
		}
		out.Complete(err)
	}()
	return out
}
