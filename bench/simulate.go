package bench

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/hiercomm/hiercomm/comm/schedule"
)

// SimModel is the α-β model a simulation charges: a message of b bytes
// from one rank to another takes SendOverhead + Alpha + b·Beta seconds to
// arrive (the intra-node pair when both ranks are on one node), a
// sender's outgoing link carries one message at a time, and reducing b
// bytes takes b / ReduceBytesPerSec (copies within a rank are not
// charged).
type SimModel struct {
	Alpha, Beta           float64 // between nodes: seconds, seconds per byte
	IntraAlpha, IntraBeta float64 // within a node
	ReduceBytesPerSec     float64
	// RanksPerNode places the ranks node-major (node = rank / RanksPerNode);
	// if zero, every rank is its own node.
	RanksPerNode int
	// Calls is how many calls run back to back, as the bench's timed loop
	// runs them: each rank starts its next call once it has finished its
	// last, so calls overlap where a rank may run ahead (a broadcast's
	// root). If below 2, one.
	Calls int
	// SendOverhead is what a send costs its sender before its bytes go
	// (seconds; the gap of the LogP model): the send's lane is busy for
	// it, and the link starts the message no earlier. Alpha then is what
	// a message costs beyond it. Without it (0) a rank's sends cost it
	// nothing, and a broadcast's root runs ahead of back-to-back calls
	// without bound.
	SendOverhead float64
	// CacheBeta, if set, is Beta (and IntraBeta) for a call of at most
	// CacheBytes (its size in nccl-tests' convention): a call whose
	// buffers stay in the processor's caches moves its bytes faster than
	// one that streams through memory, which Beta, fitted from large
	// sizes, describes (FitCacheBeta). From CacheBytes to 4·CacheBytes
	// the two are joined geometrically. PredictFlat applies it (ForCall).
	CacheBeta  float64
	CacheBytes int64
}

// ForCall is m for a call of size bytes: Beta and IntraBeta are
// CacheBeta's where CacheBeta applies (see there), and m has no CacheBeta.
func (m SimModel) ForCall(bytes int64) SimModel {
	cb, lim := m.CacheBeta, float64(m.CacheBytes)
	m.CacheBeta, m.CacheBytes = 0, 0
	if cb <= 0 || lim <= 0 || float64(bytes) >= 4*lim {
		return m
	}
	f := 0.0 // the share of the large sizes' β: 0 up to CacheBytes, 1 from 4·CacheBytes
	if b := float64(bytes); b > lim {
		f = math.Log2(b/lim) / 2
	}
	join := func(large float64) float64 {
		if large <= 0 {
			return cb
		}
		return math.Exp((1-f)*math.Log(cb) + f*math.Log(large))
	}
	m.Beta, m.IntraBeta = join(m.Beta), join(m.IntraBeta)
	return m
}

// SimResult is a simulated collective: when the last rank finished, and
// what each rank sent.
type SimResult struct {
	// Seconds is when the last rank finished the first call; PerCall the
	// time per call once calls follow each other (Seconds for one call).
	Seconds, PerCall float64
	Messages         []int   // frames each rank sent, per call
	Bytes            []int64 // bytes each rank sent, per call
	// InterBytes are the bytes each rank sent to other nodes, per call.
	InterBytes []int64
}

// MaxInterBytes is the most any rank sent to other nodes.
func (r SimResult) MaxInterBytes() int64 { return slices.Max(append([]int64{0}, r.InterBytes...)) }

// frameKey names one frame of a simulation.
type frameKey struct {
	from, to, call int
	tag            uint32
}

// frame is a frame in flight: its length in elements and when it arrives.
type frame struct {
	elems   int
	arrival float64
}

// Simulate runs the schedules of one collective on p ranks (build returns
// rank r's, for elements of es bytes) under m, as a dataflow: every step
// starts when its lane's previous step and its After step are done and,
// for a receive, its frame has arrived. It pairs every receive with its
// send (same peers and tag, same length) and fails when a step can never
// run (a receive without its send: the schedules do not pair up). It does
// no I/O and reads no clock, so it runs thousands of ranks.
func Simulate(p, es int, build func(r int) schedule.Schedule, m SimModel) (SimResult, error) {
	res := SimResult{Messages: make([]int, p), Bytes: make([]int64, p), InterBytes: make([]int64, p)}
	type rankState struct {
		s        schedule.Schedule
		lanes    [][]int   // step indices of each lane, in order
		next     []int     // next position in each lane
		laneFree []float64 // when each lane's last step ended
		done     []float64 // when each step ended; NaN before
		nicFree  float64   // when this rank's outgoing link is free
		cpuFree  float64   // when this rank's last send overhead ended
		left     int       // steps of the current call not yet run
		call     int       // the current call
		end      float64   // when this rank's last step so far ended
	}
	calls := max(m.Calls, 1)
	finish := make([]float64, calls) // when the last rank finished each call
	node := func(r int) int {
		if m.RanksPerNode <= 0 {
			return r
		}
		return r / m.RanksPerNode
	}
	ranks := make([]*rankState, p)
	total := 0
	for r := range ranks {
		s := build(r)
		st := &rankState{s: s, lanes: make([][]int, max(s.Lanes, 1)), done: make([]float64, len(s.Steps)), left: len(s.Steps)}
		for i, step := range s.Steps {
			st.lanes[step.Lane] = append(st.lanes[step.Lane], i)
			st.done[i] = math.NaN()
		}
		st.next, st.laneFree = make([]int, len(st.lanes)), make([]float64, len(st.lanes))
		ranks[r] = st
		total += calls * len(s.Steps)
	}
	frames := make(map[frameKey]frame)
	// Run ranks until none can move; a rank is looked at again when a
	// frame is sent to it.
	queue := make([]int, p)
	queued := make([]bool, p)
	for r := range queue {
		queue[r], queued[r] = r, true
	}
	for len(queue) > 0 {
		r := queue[0]
		queue = queue[1:]
		queued[r] = false
		st := ranks[r]
		for moved := true; moved; {
			moved = false
			for l, lane := range st.lanes {
			steps:
				for st.next[l] < len(lane) {
					i := lane[st.next[l]]
					step := st.s.Steps[i]
					start := st.laneFree[l]
					if step.After >= 0 {
						if math.IsNaN(st.done[step.After]) {
							break steps
						}
						start = math.Max(start, st.done[step.After])
					}
					var end float64
					switch step.Kind {
					case schedule.Send:
						bytes := float64(step.Src.Len * es)
						alpha, beta := m.Alpha, m.Beta
						if node(step.Peer) == node(r) {
							alpha, beta = m.IntraAlpha, m.IntraBeta
						} else if st.call == 0 {
							res.InterBytes[r] += int64(bytes)
						}
						// The overhead is the rank's processor's: its sends
						// pay it one after another, whatever their lanes.
						start = math.Max(start, st.cpuFree) + m.SendOverhead
						st.cpuFree = start
						depart := math.Max(start, st.nicFree)
						st.nicFree = depart + bytes*beta
						k := frameKey{r, step.Peer, st.call, step.Tag}
						if _, dup := frames[k]; dup {
							return res, fmt.Errorf("simulate: rank %d sends frame %d to rank %d twice", r, step.Tag, step.Peer)
						}
						frames[k] = frame{elems: step.Src.Len, arrival: st.nicFree + alpha}
						if st.call == 0 {
							res.Messages[r]++
							res.Bytes[r] += int64(bytes)
						}
						end = start // the transport buffers: a send waits for nothing but its overhead
						if !queued[step.Peer] {
							queue, queued[step.Peer] = append(queue, step.Peer), true
						}
					case schedule.Recv:
						k := frameKey{step.Peer, r, st.call, step.Tag}
						f, ok := frames[k]
						if !ok {
							break steps
						}
						if f.elems != step.Dst.Len {
							return res, fmt.Errorf("simulate: rank %d receives frame %d of %d elements from rank %d into %d", r, step.Tag, f.elems, step.Peer, step.Dst.Len)
						}
						delete(frames, k)
						end = math.Max(start, f.arrival)
						if step.Op != schedule.Copy && m.ReduceBytesPerSec > 0 {
							end += float64(step.Dst.Len*es) / m.ReduceBytesPerSec
						}
					case schedule.Local:
						end = start
						if step.Op != schedule.Copy && m.ReduceBytesPerSec > 0 {
							end += float64(step.Dst.Len*es) / m.ReduceBytesPerSec
						}
					default:
						end = start
					}
					st.done[i], st.laneFree[l] = end, end
					st.next[l]++
					st.left--
					total--
					st.end = math.Max(st.end, end)
					finish[st.call] = math.Max(finish[st.call], st.end)
					moved = true
					if st.left == 0 && st.call+1 < calls {
						// The call returns on this rank: the next one starts.
						st.call++
						st.left = len(st.s.Steps)
						for j := range st.done {
							st.done[j] = math.NaN()
						}
						for j := range st.next {
							st.next[j], st.laneFree[j] = 0, st.end
						}
						break steps
					}
				}
			}
		}
	}
	if total > 0 {
		for r, st := range ranks {
			if st.left > 0 {
				return res, fmt.Errorf("simulate: rank %d is stuck with %d of %d steps left (a receive whose send never comes)", r, st.left, len(st.s.Steps))
			}
		}
	}
	res.Seconds, res.PerCall = finish[0], finish[0]
	if calls > 1 {
		res.PerCall = (finish[calls-1] - finish[0]) / float64(calls-1)
	}
	if len(frames) > 0 {
		return res, errors.New("simulate: frames were sent that no rank receives")
	}
	return res, nil
}

// Cache-resident sizes for FitCacheBeta: from the first size whose
// transfer time clearly exceeds α, up to the largest whose send and
// receive buffers stay in a core's caches on the machines measured here.
const (
	cacheFitMin = 16 << 10
	CacheBytes  = 256 << 10
)

// FitCacheBeta fits the per-byte time of calls whose buffers stay in the
// caches: the median of (t − alpha)/b over the rows from 16 KiB to
// CacheBytes (SimModel.CacheBeta). ok is false without such rows, or when
// they take no longer than alpha.
func FitCacheBeta(rows []Row, alpha float64) (beta float64, ok bool) {
	var slopes []float64
	for _, r := range rows {
		if r.TimeUS > 0 && r.Bytes >= cacheFitMin && r.Bytes <= CacheBytes {
			slopes = append(slopes, (r.TimeUS*1e-6-alpha)/float64(r.Bytes))
		}
	}
	if len(slopes) == 0 {
		return 0, false
	}
	beta = median(slopes)
	return beta, beta > 0
}

// FitAlphaBeta fits the α-β model t(b) = α + b·β to rows of one
// point-to-point operation (sendrecv): α is the median time of the sizes
// up to 4 KiB, β the median of (t − α)/b over the sizes from 1 MiB. ok is
// false when the rows lack either range.
func FitAlphaBeta(rows []Row) (alpha, beta float64, ok bool) {
	var small, slopes []float64
	for _, r := range rows {
		if r.TimeUS > 0 && r.Bytes <= 4<<10 {
			small = append(small, r.TimeUS*1e-6)
		}
	}
	if len(small) == 0 {
		return 0, 0, false
	}
	alpha = median(small)
	for _, r := range rows {
		if r.TimeUS > 0 && r.Bytes >= 1<<20 {
			slopes = append(slopes, math.Max(r.TimeUS*1e-6-alpha, 0)/float64(r.Bytes))
		}
	}
	if len(slopes) == 0 {
		return alpha, 0, false
	}
	sort.Float64s(slopes)
	return alpha, median(slopes), true
}
