package nexar

import (
	"fmt"
	"sync"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/schedule"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// runCollective executes a validated call on this rank: it picks the
// schedule (the cost model chooses where there is a choice; every rank
// chooses alike) and runs it over the op's frames.
func runCollective(o *op, c comm.Call) error {
	P, r := o.size(), o.rank()
	send, recv := tier.PreMulSend(c, c.Send.Bytes()), c.Recv.Bytes()
	k := tier.Kernel{Size: max(1, c.Send.DType().Size(), c.Recv.DType().Size())}
	if c.Kind.Reduces() {
		dt := c.Send.DType()
		if c.Kind == comm.KindReduceScatter {
			dt = c.Recv.DType()
		}
		var err error
		if k, err = tier.NewKernel(dt, c.Op); err != nil {
			return err
		}
	}
	es := k.Size
	seg := o.segBytes(es) / es
	key := scheduleKey{kind: c.Kind, es: es, send: len(send), recv: len(recv), root: c.Root}
	if s, ok := o.c.schedules.get(key); ok {
		return o.run(s, send, recv, k)
	}
	var s schedule.Schedule
	switch c.Kind {
	case comm.KindAllReduce:
		n := len(recv) / es
		if o.c.algorithm(c.Kind, len(recv), seg*es) == schedule.Doubling {
			s = schedule.DoublingAllReduce(P, r, n, seg)
		} else {
			s = schedule.RingAllReduce(P, r, n, seg)
		}
	case comm.KindBroadcast:
		n := len(recv) / es
		if o.c.algorithm(c.Kind, len(recv), seg*es) == schedule.Tree {
			s = schedule.TreeBroadcast(P, r, c.Root, n, seg)
		} else {
			s = schedule.ChainBroadcast(P, r, c.Root, n, seg)
		}
	case comm.KindReduce:
		s = schedule.BinomialReduce(P, r, c.Root, len(send)/es, seg)
	case comm.KindAllGather:
		s = schedule.RingAllGather(P, r, len(send)/es, seg)
	case comm.KindReduceScatter:
		switch o.c.algorithm(c.Kind, len(send), seg*es) {
		case schedule.Halving:
			s = schedule.HalvingReduceScatter(P, r, len(recv)/es, seg)
		case schedule.Doubling:
			s = schedule.DoublingReduceScatter(P, r, len(recv)/es, seg)
		default:
			s = schedule.RingReduceScatter(P, r, len(recv)/es, seg)
		}
	case comm.KindAllToAll:
		counts := make([]int, P)
		for i := range counts {
			counts[i] = len(send) / P / es
		}
		s = schedule.PairwiseAllToAll(P, r, counts, counts, seg, false)
	case comm.KindAllToAllV:
		if c.SendCounts[r] != c.RecvCounts[r] {
			return &comm.ArgError{Kind: comm.KindAllToAllV, Arg: fmt.Sprintf("recvCounts[%d]", r),
				Problem: fmt.Sprintf("is %d but sendCounts[%d] is %d (this rank's message to itself)", c.RecvCounts[r], r, c.SendCounts[r])}
		}
		s = schedule.PairwiseAllToAll(P, r, c.SendCounts, c.RecvCounts, seg, true)
	case comm.KindGather:
		s = schedule.Gather(P, r, c.Root, len(send)/es, seg)
	case comm.KindScatter:
		s = schedule.Scatter(P, r, c.Root, len(recv)/es, seg)
	case comm.KindScan:
		s = schedule.Scan(P, r, len(send)/es, seg, false)
	case comm.KindExScan:
		s = schedule.Scan(P, r, len(send)/es, seg, true)
	case comm.KindBarrier:
		s = schedule.Barrier(P, r)
	default:
		return &comm.ArgError{Kind: c.Kind, Arg: "kind", Problem: "not a collective"}
	}
	if c.Kind != comm.KindAllToAllV { // its schedule depends on the counts too
		o.c.schedules.put(key, s)
	}
	return o.run(s, send, recv, k)
}

// algorithm is the schedule the cost model picks for a collective of kind
// whose message has n bytes (the vector of an AllReduce or a Broadcast,
// the input of a ReduceScatter), cut into segments of seg bytes: the
// choice every rank makes alike, for runCollective and for Route. It is 0
// for a kind that has one schedule.
func (c *Comm) algorithm(kind comm.Kind, n, seg int) schedule.Algorithm {
	switch kind {
	case comm.KindAllReduce:
		return c.opt.Cost.AllReduce(n, c.Size())
	case comm.KindBroadcast:
		return c.opt.Cost.Broadcast(n, c.Size(), seg)
	case comm.KindReduceScatter:
		return c.opt.Cost.ReduceScatter(n, c.Size())
	}
	return 0
}

// Route says, for logs (hiercomm's per-call trace), how this communicator
// runs call: the schedule, as runCollective picks it (the cost model's
// choice where there is one), and on how many ranks.
func (c *Comm) Route(call comm.Call) string {
	es := max(1, call.Send.DType().Size(), call.Recv.DType().Size())
	seg := max(es, c.opt.SegmentBytes/es*es)
	var name string
	switch call.Kind {
	case comm.KindAllReduce, comm.KindBroadcast:
		name = c.algorithm(call.Kind, call.Recv.ByteLen(), seg).String()
	case comm.KindReduceScatter:
		name = c.algorithm(call.Kind, call.Send.ByteLen(), seg).String()
	case comm.KindReduce:
		name = "binomial tree"
	case comm.KindAllGather:
		name = "ring"
	case comm.KindAllToAll, comm.KindAllToAllV:
		name = "pairwise exchange"
	case comm.KindGather, comm.KindScatter:
		name = "direct to and from the root"
	case comm.KindScan, comm.KindExScan:
		name = "Hillis–Steele"
	case comm.KindBarrier:
		name = "dissemination"
	case comm.KindSend, comm.KindRecv:
		return "point-to-point"
	default:
		return call.Kind.String()
	}
	return fmt.Sprintf("%s, %d ranks", name, c.Size())
}

// scheduleKey is what a collective's schedule depends on besides the
// communicator (its size, this rank, its options): a trainer repeats the
// same few calls, and building a schedule costs allocations on every call.
type scheduleKey struct {
	kind           comm.Kind
	es, send, recv int
	root           int
}

// scheduleCache keeps the schedules built for recent calls; a schedule is
// never written once built, so runs share it.
type scheduleCache struct {
	mu sync.Mutex
	m  map[scheduleKey]schedule.Schedule
}

// scheduleCacheSize bounds the cache; when full it starts over.
const scheduleCacheSize = 64

func (sc *scheduleCache) get(k scheduleKey) (schedule.Schedule, bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	s, ok := sc.m[k]
	return s, ok
}

func (sc *scheduleCache) put(k scheduleKey, s schedule.Schedule) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.m == nil || len(sc.m) >= scheduleCacheSize {
		sc.m = make(map[scheduleKey]schedule.Schedule, scheduleCacheSize)
	}
	sc.m[k] = s
}

// ringAllGather completes buf (P blocks of elements of es bytes, this
// rank's block already in place) with the ring AllGather schedule; Split
// exchanges colors and keys with it.
func ringAllGather(o *op, buf []byte, es int) error {
	P, r := o.size(), o.rank()
	n := len(buf) / es / P
	return o.run(schedule.RingAllGather(P, r, n, o.segBytes(es)/es), buf[r*n*es:(r+1)*n*es], buf, tier.Kernel{Size: es})
}
