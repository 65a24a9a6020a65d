package commtest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// The reference communicator: an obviously correct comm.Communicator for N
// goroutine ranks, to prove that the suites pass on a correct implementation
// and (with a bug switched on) fail on a wrong one. Every collective meets at
// a rendezvous keyed by its sequence number; the last rank to arrive checks
// the calls (tier.Validate, then every Signature), computes every rank's
// result sequentially, element by element in float64 or integer arithmetic,
// and hands the results back. Send and Recv meet in slots keyed by (source,
// destination, tag, message number).

// bug is a defect the reference can be built with.
type bug uint8

const (
	noBug              bug = iota
	bugRSShift             // ReduceScatter gives rank r block (r+1) mod N (nexar's defect)
	bugShardOnly           // AllReduce reduces only the first half across nodes of 2 ranks; the rest only within the node (nexar-nccl's defect)
	bugOddDrop             // AllReduce leaves the last element unwritten when the count is odd (nexar's pipelining defect)
	bugExScanProdZero      // ExScan with Prod gives rank 0 zeros instead of ones
	bugSplitNoP2P          // communicators from Split cannot Send or Recv (nexar's defect)
	bugGatherOrder         // Gather puts the blocks at the root in reverse rank order
	bugScanExclusive       // Scan computes ExScan
	bugBcastFromZero       // Broadcast always sends rank 0's buffer
	bugMinIgnoresNaN       // Min and Max skip NaN operands (C's fmin)
	bugRankOrderSum        // float Sum accumulates in the dtype, starting at a different rank on each rank
	bugTagIgnored          // Send and Recv match by peer only
	bugNoAbandon           // a bad argument is reported on its own rank only; the others wait
	bugNoMismatch          // a mismatch fails every rank with an error that does not say so
	bugDeaf                // like bugNoAbandon, and collectives ignore their context: the others hang
	bugBatchUnmarked       // collectives compare their calls without the comm.Batch they are in
	bugPreMulOwnFactor     // PreMulSum scales every rank's input by the receiving rank's factor
	bugXorAsOr             // BXor computes OR
)

type refGroup struct {
	name  string
	size  int
	bug   bug
	child bool          // made by Split
	busy  *atomic.Int64 // nanoseconds spent computing rounds, shared with the children

	mu      sync.Mutex // guards everything below
	rounds  map[uint64]*refRound
	slots   map[slotKey]chan []byte // one message each
	sendSeq map[boxKey]uint64
	recvSeq map[boxKey]uint64
	// mismatch, once a round mismatched, aborts the group: the rounds
	// waiting and every later one fail with it, as the contract says
	// (a rank with a collective more than the others must not wait).
	mismatch error
}

type boxKey struct{ src, dst, tag int }

type slotKey struct {
	box boxKey
	n   uint64
}

// refRound is one collective (or Split) at one sequence number.
type refRound struct {
	seq      uint64
	entries  []refEntry
	arrived  int
	done     chan struct{}
	finished bool
	results  []error
	children []comm.Communicator // Split
}

type refEntry struct {
	call       comm.Call
	sig        comm.Signature // tier.SignatureOf: with the comm.Batch the call is in
	err        error          // from tier.Validate
	split      bool
	color, key int
}

type refComm struct {
	tier.Blocking
	refControl
	g    *refGroup
	rank int

	mu     sync.Mutex // guards seq and closed
	seq    uint64
	closed bool
}

func newRefGroup(name string, size int, b bug, busy *atomic.Int64) *refGroup {
	return &refGroup{name: name, size: size, bug: b, child: busy != nil, busy: cmp.Or(busy, new(atomic.Int64)),
		rounds: map[uint64]*refRound{}, slots: map[slotKey]chan []byte{},
		sendSeq: map[boxKey]uint64{}, recvSeq: map[boxKey]uint64{}}
}

func newRefWorld(size int, b bug) []comm.Communicator {
	g := newRefGroup("world", size, b, nil)
	comms := make([]comm.Communicator, size)
	for r := range comms {
		comms[r] = newRefComm(g, r)
	}
	return comms
}

func newRefComm(g *refGroup, rank int) *refComm {
	c := &refComm{g: g, rank: rank}
	c.Blocking = tier.Blocking{S: c}
	return c
}

func (c *refComm) Rank() int { return c.rank }
func (c *refComm) Size() int { return c.g.size }

// refControl is the reference's comm.Control: its ranks share no
// transport for news, so Abort marks this rank aborted and tells no one,
// no outside detector's news changes anything, no census is carried, and
// Shrink is refused with comm.ErrCannotShrink. The conformance suite
// checks results, which need none of it.
type refControl struct {
	mu    sync.Mutex
	ch    chan struct{}
	cause error
}

func (l *refControl) signal() chan struct{} {
	if l.ch == nil {
		l.ch = make(chan struct{})
	}
	return l.ch
}

func (l *refControl) Abort(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cause == nil {
		l.cause = cause
		close(l.signal())
	}
}

func (l *refControl) Aborted() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.signal()
}

func (l *refControl) AbortCause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

func (*refControl) PeerFailed(int, error)                              {}
func (*refControl) SetProgress(func() comm.Progress) (func(), bool)    { return func() {}, false }
func (*refControl) Progress(context.Context) ([]comm.Progress, []bool) { return nil, nil }
func (*refControl) Announce(comm.Progress)                             {}

func (*refControl) Shrink(context.Context) (comm.Communicator, error) {
	return nil, fmt.Errorf("the reference communicator: %w", comm.ErrCannotShrink)
}

func (c *refComm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

func (c *refComm) opErr(k comm.Kind, seq uint64, peer int, err error) error {
	if err == nil {
		return nil
	}
	return &comm.OpError{Rank: c.rank, Peer: peer, Kind: k, Seq: seq, Comm: c.g.name, Err: err}
}

// next takes the next sequence number (for a collective), or reports Close.
func (c *refComm) next(collective bool) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, false
	}
	if collective {
		c.seq++
		return c.seq, true
	}
	return 0, true
}

func (c *refComm) Start(ctx context.Context, call comm.Call) *comm.Work {
	seq, ok := c.next(call.Kind.Collective())
	if !ok {
		return comm.Failed(c.opErr(call.Kind, seq, -1, comm.ErrClosed))
	}
	err := tier.ValidateHost(ctx, call, c.rank, c.g.size)
	if call.Kind == comm.KindSend || call.Kind == comm.KindRecv {
		if err == nil && c.g.bug == bugSplitNoP2P && c.g.child {
			err = errors.New("point-to-point is not supported on split communicators")
		}
		if err != nil {
			return comm.Failed(c.opErr(call.Kind, 0, call.Peer, err))
		}
		return c.p2p(ctx, call)
	}
	w := comm.NewWork()
	go func() {
		sig := tier.SignatureOf(ctx, call)
		if c.g.bug == bugBatchUnmarked {
			sig = call.Signature()
		}
		_, err := c.meet(ctx, seq, refEntry{call: call, sig: sig, err: err})
		w.Complete(c.opErr(call.Kind, seq, -1, err))
	}()
	return w
}

func (c *refComm) Split(ctx context.Context, color, key int) (comm.Communicator, error) {
	seq, ok := c.next(true)
	if !ok {
		return nil, c.opErr(comm.KindSplit, seq, -1, comm.ErrClosed)
	}
	split := comm.Call{Kind: comm.KindSplit}
	rd, err := c.meet(ctx, seq, refEntry{call: split, sig: split.Signature(), split: true, color: color, key: key})
	if err != nil {
		return nil, c.opErr(comm.KindSplit, seq, -1, err)
	}
	return rd.children[c.rank], nil
}

// meet posts this rank's entry for collective seq and waits for the result.
func (c *refComm) meet(ctx context.Context, seq uint64, e refEntry) (*refRound, error) {
	g := c.g
	g.mu.Lock()
	rd := g.rounds[seq]
	if rd == nil {
		rd = &refRound{seq: seq, entries: make([]refEntry, g.size), done: make(chan struct{})}
		g.rounds[seq] = rd
	}
	if g.mismatch != nil {
		g.mu.Unlock()
		return rd, &comm.AbortedError{Cause: g.mismatch}
	}
	if e.err != nil && (g.bug == bugNoAbandon || g.bug == bugDeaf) {
		g.mu.Unlock()
		return rd, e.err // the others are never told
	}
	rd.entries[c.rank] = e
	rd.arrived++
	if rd.arrived == g.size && !rd.finished {
		t0 := time.Now()
		g.finish(rd, g.compute(rd))
		g.busy.Add(int64(time.Since(t0)))
	}
	g.mu.Unlock()
	deaf := ctx.Done()
	if g.bug == bugDeaf {
		deaf = nil
	}
	select {
	case <-rd.done:
	case <-deaf:
		g.mu.Lock()
		if !rd.finished {
			cause := ctx.Err()
			res := make([]error, g.size)
			for q := range res {
				res[q] = &comm.RemoteError{Peer: c.rank, Reason: cause.Error(),
					Timeout: errors.Is(cause, context.DeadlineExceeded), Canceled: errors.Is(cause, context.Canceled)}
			}
			res[c.rank] = tier.ContextError(cause)
			g.finish(rd, res)
		}
		g.mu.Unlock()
	}
	return rd, rd.results[c.rank]
}

// finish completes rd with results; g.mu is held.
func (g *refGroup) finish(rd *refRound, results []error) {
	rd.results, rd.finished = results, true
	delete(g.rounds, rd.seq)
	close(rd.done)
}

// compute runs a complete round: every entry is in. g.mu is held, so the
// rounds of a group are computed one at a time.
func (g *refGroup) compute(rd *refRound) []error {
	res := make([]error, g.size)
	for bad, e := range rd.entries {
		if e.err != nil {
			for q := range res {
				res[q] = &comm.RemoteError{Peer: bad, Reason: e.err.Error()}
			}
			for q, e := range rd.entries {
				if e.err != nil {
					res[q] = e.err
				}
			}
			return res
		}
	}
	sig := func(q int) comm.Signature { return rd.entries[q].sig }
	mismatch := false
	for q := range res {
		for p := range res {
			if sig(p) != sig(q) || g.countsDisagree(rd, p, q) {
				mismatch = true
				res[q] = &comm.MismatchError{Peer: p, Seq: rd.seq, Local: sig(q), Remote: sig(p)}
				break
			}
		}
	}
	if mismatch {
		if g.bug == bugNoMismatch {
			for q := range res {
				res[q] = errors.New("collective failed")
			}
			return res
		}
		g.mismatch = res[0]
		for _, other := range g.rounds {
			if other != rd && !other.finished {
				aborted := make([]error, g.size)
				for q := range aborted {
					aborted[q] = &comm.AbortedError{Cause: g.mismatch}
				}
				g.finish(other, aborted)
			}
		}
		return res
	}
	if rd.entries[0].split {
		rd.children = g.split(rd)
		return res
	}
	calls := make([]comm.Call, g.size)
	for q, e := range rd.entries {
		calls[q] = e.call
	}
	g.execute(calls)
	return res
}

// countsDisagree reports whether ranks p and q disagree on the AllToAllV
// counts between them (which no Signature carries).
func (g *refGroup) countsDisagree(rd *refRound, p, q int) bool {
	cp, cq := rd.entries[p].call, rd.entries[q].call
	if cp.Kind != comm.KindAllToAllV {
		return false
	}
	return cp.SendCounts[q] != cq.RecvCounts[p] || cq.SendCounts[p] != cp.RecvCounts[q]
}

func (g *refGroup) split(rd *refRound) []comm.Communicator {
	colors := map[int][]int{}
	for q, e := range rd.entries {
		if e.color != comm.NoColor {
			colors[e.color] = append(colors[e.color], q)
		}
	}
	out := make([]comm.Communicator, g.size)
	for color, members := range colors {
		slices.SortStableFunc(members, func(a, b int) int { return cmp.Compare(rd.entries[a].key, rd.entries[b].key) })
		child := newRefGroup(fmt.Sprintf("%s/split#%d(color %d)", g.name, rd.seq, color), len(members), g.bug, g.busy)
		for i, q := range members {
			out[q] = newRefComm(child, i)
		}
	}
	return out
}

// execute computes every rank's result of one collective and writes it.
// Inputs are copied first, so that in-place calls read before anyone writes.
func (g *refGroup) execute(calls []comm.Call) {
	P := g.size
	k := calls[0]
	in := make([][]byte, P)
	for q, c := range calls {
		in[q] = bytes.Clone(c.Send.Bytes())
	}
	dt := k.Send.DType()
	if dt == 0 {
		dt = k.Recv.DType()
	}
	e := elemOf(dt)
	es := e.size
	all := make([]int, P)
	for q := range all {
		all[q] = q
	}
	block := func(q, i, n int) []byte { return in[q][i*n*es : (i+1)*n*es] }
	out := make([][]byte, P) // the new content of each rank's Recv; nil: none
	switch k.Kind {
	case comm.KindAllReduce:
		n := k.Send.Len()
		for q := range out {
			out[q] = g.reduce(e, calls, in, all, 0, n, q)
			if g.bug == bugShardOnly {
				node := []int{q &^ 1}
				if q|1 < P {
					node = append(node, q|1)
				}
				h := (n + 1) / 2
				copy(out[q][h*es:], g.reduce(e, calls, in, node, h, n-h, q))
			}
			if g.bug == bugOddDrop && n%2 == 1 {
				out[q] = append(out[q][:(n-1)*es:(n-1)*es], calls[q].Recv.Bytes()[(n-1)*es:]...)
			}
		}
	case comm.KindReduce:
		out[k.Root] = g.reduce(e, calls, in, all, 0, k.Send.Len(), k.Root)
	case comm.KindReduceScatter:
		n := k.Recv.Len()
		for q := range out {
			b := q
			if g.bug == bugRSShift {
				b = (q + 1) % P
			}
			out[q] = g.reduce(e, calls, in, all, b*n, n, q)
		}
	case comm.KindScan, comm.KindExScan:
		for q := range out {
			upto := q + 1
			if k.Kind == comm.KindExScan || g.bug == bugScanExclusive {
				upto = q
			}
			out[q] = g.reduce(e, calls, in, all[:upto], 0, k.Send.Len(), q)
			if k.Kind == comm.KindExScan && q == 0 && k.Op == comm.Prod && g.bug == bugExScanProdZero {
				clear(out[q])
			}
		}
	case comm.KindBroadcast:
		root := k.Root
		if g.bug == bugBcastFromZero {
			root = 0
		}
		for q := range out {
			out[q] = in[root]
		}
	case comm.KindAllGather:
		for q := range out {
			out[q] = slices.Concat(in...)
		}
	case comm.KindGather:
		order := slices.Clone(all)
		if g.bug == bugGatherOrder {
			slices.Reverse(order)
		}
		for _, q := range order {
			out[k.Root] = append(out[k.Root], in[q]...)
		}
	case comm.KindScatter:
		n := calls[0].Recv.Len()
		for q := range out {
			out[q] = block(k.Root, q, n)
		}
	case comm.KindAllToAll:
		n := k.Send.Len() / P
		for q := range out {
			for p := range P {
				out[q] = append(out[q], block(p, q, n)...)
			}
		}
	case comm.KindAllToAllV:
		for q := range out {
			out[q] = []byte{}
			for p := range P {
				off := 0
				for j := range q {
					off += calls[p].SendCounts[j]
				}
				out[q] = append(out[q], in[p][off*es:(off+calls[p].SendCounts[q])*es]...)
			}
		}
	case comm.KindBarrier:
	}
	for q, b := range out {
		if b != nil {
			copy(calls[q].Recv.Bytes(), b)
		}
	}
}

// reduce is the reduction by op over the ranks' inputs at [off, off+n), in
// rank order. Floats go through float64 and are rounded once to the dtype;
// integers wrap. An empty set of ranks gives the op's identity. self is the
// rank that gets the result (for bugRankOrderSum).
func (g *refGroup) reduce(e elem, calls []comm.Call, in [][]byte, ranks []int, off, n, self int) []byte {
	op := calls[0].Op
	out := make([]byte, n*e.size)
	for i := range n {
		if e.boolean { // logical: OR for Sum, Max, BOr; AND for Prod, Min, BAnd
			acc := op == comm.Prod || op == comm.Min || op == comm.BAnd
			for _, q := range ranks {
				v := e.get(in[q], off+i) == 1
				switch op {
				case comm.Prod, comm.Min, comm.BAnd:
					acc = acc && v
				case comm.BXor:
					acc = acc != v
					if g.bug == bugXorAsOr {
						acc = acc || v
					}
				default:
					acc = acc || v
				}
			}
			if acc {
				e.put(out, i, 1)
			} else {
				e.put(out, i, 0)
			}
			continue
		}
		if !e.float {
			var acc uint64
			switch {
			case op == comm.BAnd:
				acc = e.mask()
			case op == comm.Prod:
				acc = 1
			case op == comm.Min && e.signed:
				acc = e.mask() >> 1
			case op == comm.Min:
				acc = e.mask()
			case op == comm.Max && e.signed:
				acc = e.mask()>>1 + 1
			}
			for _, q := range ranks {
				v := e.get(in[q], off+i)
				switch op {
				case comm.Sum:
					acc += v
				case comm.Prod:
					acc *= v
				case comm.BAnd:
					acc &= v
				case comm.BOr:
					acc |= v
				case comm.BXor:
					acc ^= v
					if g.bug == bugXorAsOr {
						acc |= v
					}
				case comm.Min:
					if e.sext(v) < e.sext(acc) && e.signed || v&e.mask() < acc&e.mask() && !e.signed {
						acc = v
					}
				case comm.Max:
					if e.sext(v) > e.sext(acc) && e.signed || v&e.mask() > acc&e.mask() && !e.signed {
						acc = v
					}
				}
			}
			e.put(out, i, acc)
			continue
		}
		acc := 0.0
		switch op {
		case comm.Prod:
			acc = 1
		case comm.Min:
			acc = math.Inf(1)
		case comm.Max:
			acc = math.Inf(-1)
		}
		order := ranks
		if g.bug == bugRankOrderSum && op == comm.Sum && len(ranks) == g.size {
			order = append(slices.Clone(ranks[self:]), ranks[:self]...)
		}
		for _, q := range order {
			v := e.toFloat(e.get(in[q], off+i))
			if op == comm.PreMulSum { // the product, rounded once to the dtype
				k := calls[q].Scalar
				if g.bug == bugPreMulOwnFactor {
					k = calls[self].Scalar
				}
				v = e.toFloat(e.fromFloat(v * e.toFloat(e.fromFloat(k))))
			}
			switch op {
			case comm.Sum, comm.Avg, comm.PreMulSum:
				acc += v
				if g.bug == bugRankOrderSum {
					acc = e.toFloat(e.fromFloat(acc))
				}
			case comm.Prod:
				acc *= v
			case comm.Min, comm.Max:
				switch {
				case math.IsNaN(v) && g.bug == bugMinIgnoresNaN:
				case math.IsNaN(acc) || math.IsNaN(v):
					acc = math.NaN()
				case op == comm.Min && v < acc, op == comm.Max && v > acc:
					acc = v
				}
			}
		}
		if op == comm.Avg {
			acc /= float64(g.size)
		}
		e.put(out, i, e.fromFloat(acc))
	}
	return out
}

// p2p runs a Send or Recv: the k-th Send from src to dst with a tag fills
// slot k of (src, dst, tag); the k-th Recv started for it empties it.
func (c *refComm) p2p(ctx context.Context, call comm.Call) *comm.Work {
	g := c.g
	tag := call.Tag
	if g.bug == bugTagIgnored {
		tag = 0
	}
	g.mu.Lock()
	var key boxKey
	var seqs map[boxKey]uint64
	if call.Kind == comm.KindSend {
		key, seqs = boxKey{src: c.rank, dst: call.Peer, tag: tag}, g.sendSeq
	} else {
		key, seqs = boxKey{src: call.Peer, dst: c.rank, tag: tag}, g.recvSeq
	}
	sk := slotKey{box: key, n: seqs[key]}
	seqs[key]++
	slot := g.slots[sk]
	if slot == nil {
		slot = make(chan []byte, 1)
		g.slots[sk] = slot
	}
	g.mu.Unlock()
	if call.Kind == comm.KindSend {
		slot <- bytes.Clone(call.Send.Bytes()) // never blocks: one message per slot
		return comm.Failed(nil)
	}
	w := comm.NewWork()
	go func() {
		select {
		case msg := <-slot:
			g.mu.Lock()
			delete(g.slots, sk)
			g.mu.Unlock()
			if len(msg) != call.Recv.ByteLen() {
				w.Complete(c.opErr(call.Kind, 0, call.Peer, &comm.ArgError{Kind: comm.KindRecv, Arg: "recv",
					Problem: fmt.Sprintf("has %d bytes, the message %d", call.Recv.ByteLen(), len(msg))}))
				return
			}
			copy(call.Recv.Bytes(), msg)
			w.Complete(nil)
		case <-ctx.Done():
			w.Complete(c.opErr(call.Kind, 0, call.Peer, tier.ContextError(ctx.Err())))
		}
	}()
	return w
}
