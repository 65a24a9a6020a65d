package schedule

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// CostModel predicts the time of a schedule as NCCL's tuner does (α-β):
// latency × messages on the critical path + bytes / bandwidth + reduced
// bytes / reduction rate, and picks the fastest schedule. It is a pure
// function of its fields and its arguments, so every rank that is given the
// same model and the same call picks the same schedule — which every rank
// must, since the schedules of one collective only pair up with themselves.
//
// It is a plain config struct: a zero field means its default, and the
// model is copied, never changed in the caller's hands.
type CostModel struct {
	// Latency is the one-way time of a small frame between two ranks (α).
	// If zero, defaults to 50 µs (loopback QUIC on a small host).
	Latency time.Duration
	// BytesPerSec is the bandwidth of one link (1/β). If zero, defaults to
	// 1e9 (1 GB/s).
	BytesPerSec float64
	// ReduceBytesPerSec is the rate of the reduction kernel. If zero,
	// defaults to 4e9.
	ReduceBytesPerSec float64
	// CPUBytesPerSec is the rate at which one rank's transport moves
	// bytes when it has a core to itself (encryption, framing, copies):
	// what bounds a link that is faster than the CPU can feed, as
	// loopback QUIC is on a small host. The bytes of a message go at the
	// lower of BytesPerSec and this. If zero, the CPU is never the bound.
	CPUBytesPerSec float64
	// Direct says that the tier runs its collectives as shared memory
	// does: in one or two steps in which every rank reads the others'
	// staged parts (shm's direct algorithms), not as schedules of
	// messages. Its Latency is then one step's (a rank staging and every
	// rank seeing it), BytesPerSec the copy rate.
	Direct bool
}

// DefaultCost is the model with every default filled in: a rough model of
// loopback QUIC on a 2-core machine (one-way latency of tens of µs, about
// 1 GB/s per link); it is not calibrated per transport yet.
var DefaultCost = CostModel{Latency: 50 * time.Microsecond, BytesPerSec: 1e9, ReduceBytesPerSec: 4e9}

// WithDefaults returns m with every zero field replaced by DefaultCost's.
func (m CostModel) WithDefaults() CostModel { return m.Or(DefaultCost) }

// Or returns m with every zero field replaced by d's: a tier with a
// model of its own (shm's) fills a user's partial model from it.
func (m CostModel) Or(d CostModel) CostModel {
	m.Latency = cmp.Or(m.Latency, d.Latency)
	m.BytesPerSec = cmp.Or(m.BytesPerSec, d.BytesPerSec)
	m.ReduceBytesPerSec = cmp.Or(m.ReduceBytesPerSec, d.ReduceBytesPerSec)
	m.CPUBytesPerSec = cmp.Or(m.CPUBytesPerSec, d.CPUBytesPerSec)
	m.Direct = m.Direct || d.Direct
	return m
}

// Validate says what is wrong with m, after its defaults: a negative
// latency or a negative rate.
func (m CostModel) Validate() error {
	m = m.WithDefaults()
	if m.Latency < 0 || m.BytesPerSec <= 0 || m.ReduceBytesPerSec <= 0 || m.CPUBytesPerSec < 0 {
		return fmt.Errorf("cost model %+v needs Latency ≥ 0, positive rates and CPUBytesPerSec ≥ 0", m)
	}
	return nil
}

// Time is the model's prediction, in seconds, of a critical path of
// messages frames, bytes moved over one link and reduced bytes.
func (m CostModel) Time(messages, bytes, reduced float64) float64 {
	m = m.WithDefaults()
	return messages*m.Latency.Seconds() + bytes/m.rate() + reduced/m.ReduceBytesPerSec
}

// rate is the bytes per second of a message: the link's, or the CPU's
// where that is lower. m has its defaults.
func (m CostModel) rate() float64 {
	if m.CPUBytesPerSec > 0 {
		return min(m.BytesPerSec, m.CPUBytesPerSec)
	}
	return m.BytesPerSec
}

// Shared is m on a host where f ranks share each core while they all
// communicate (an emulated cluster of 4 processes on 2 cores: f = 2): the
// software parts of the cost — the latency, the CPU's byte rate and the
// reduction — take f times as long; the link's rate is unchanged. f ≤ 1
// (a core per rank, or more) is m.
func (m CostModel) Shared(f float64) CostModel {
	m = m.WithDefaults()
	if !(f > 1) {
		return m
	}
	m.Latency = time.Duration(float64(m.Latency) * f)
	m.ReduceBytesPerSec /= f
	if m.CPUBytesPerSec > 0 {
		m.CPUBytesPerSec /= f
	}
	return m
}

// Algorithm names a schedule the model can pick.
type Algorithm uint8

const (
	// Ring is RingAllReduce.
	Ring Algorithm = iota + 1
	// Doubling is DoublingAllReduce (DoublingReduceScatter for a
	// ReduceScatter).
	Doubling
	// Tree is TreeBroadcast.
	Tree
	// Chain is ChainBroadcast.
	Chain
	// Halving is HalvingReduceScatter.
	Halving
)

func (a Algorithm) String() string {
	switch a {
	case Ring:
		return "ring"
	case Doubling:
		return "doubling"
	case Tree:
		return "tree"
	case Chain:
		return "chain"
	case Halving:
		return "halving"
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// AllReduce picks the AllReduce schedule for n bytes on p ranks: Doubling
// (⌊log₂ p⌋ rounds of the whole vector, +2 to fold in and out when p is not
// a power of two) when it is predicted no slower than Ring (2(p−1) steps of
// n/p bytes, (p−1)/p · n reduced).
func (m CostModel) AllReduce(n, p int) Algorithm {
	if p <= 1 {
		return Doubling
	}
	ring, doubling := m.allReduceTimes(n, p)
	if doubling <= ring {
		return Doubling
	}
	return Ring
}

// allReduceTimes are the predicted times of Ring and Doubling.
func (m CostModel) allReduceTimes(n, p int) (ring, doubling float64) {
	N, P := float64(n), float64(p)
	ring = m.Time(2*(P-1), 2*(P-1)/P*N, (P-1)/P*N)
	steps := float64(log2Floor(p))
	if p&(p-1) != 0 {
		steps += 2
	}
	return ring, m.Time(steps, steps*N, steps*N)
}

// ReduceScatter picks the ReduceScatter schedule for n bytes of send
// buffer on p ranks. On a power of two of ranks from 4, Halving
// (HalvingReduceScatter: log₂ p messages moving and reducing what the
// ring does, (p−1)/p · n, after a copy of half the send buffer into its
// slot, charged as reduced bytes) when it is predicted no slower than
// either other: it saves p−1−log₂ p latencies, and from some size on its
// copy costs more than they do. Otherwise Doubling
// (DoublingReduceScatter: the rounds of a doubling AllReduce of all n
// bytes) when it is predicted no slower than Ring (p−1 steps of n/p
// bytes, (p−1)/p · n reduced). The ring moves and reduces a quarter of
// what the AllReduce ring does per byte of result, so its crossover comes
// at a smaller size than AllReduce's.
func (m CostModel) ReduceScatter(n, p int) Algorithm {
	if p <= 1 {
		return Doubling
	}
	ring, doubling, halving := m.reduceScatterTimes(n, p)
	switch {
	case halving <= min(ring, doubling):
		return Halving
	case doubling <= ring:
		return Doubling
	}
	return Ring
}

// reduceScatterTimes are the predicted times of Ring, Doubling and
// Halving (+Inf where p is not a power of two).
func (m CostModel) reduceScatterTimes(n, p int) (ring, doubling, halving float64) {
	N, P := float64(n), float64(p)
	ring = m.Time(P-1, (P-1)/P*N, (P-1)/P*N)
	_, doubling = m.allReduceTimes(n, p)
	halving = math.Inf(1)
	if p >= 4 && p&(p-1) == 0 { // two ranks take one message whichever way
		halving = m.Time(float64(log2Floor(p)), (P-1)/P*N, (P-1)/P*N+N/2)
	}
	return ring, doubling, halving
}

// Broadcast picks the Broadcast schedule for n bytes on p ranks cut into
// pieces of seg bytes: Tree (⌈log₂ p⌉ rounds of the whole message) when it
// is predicted no slower than Chain (p−2+S piece steps for S pieces).
func (m CostModel) Broadcast(n, p, seg int) Algorithm {
	if p <= 2 {
		return Chain
	}
	N, P := float64(n), float64(p)
	steps := float64(bits.Len(uint(p - 1))) // ⌈log₂ p⌉
	tree := m.Time(steps, steps*N, 0)
	S := float64(max(1, (n+seg-1)/seg))
	chain := m.Time(P-2+S, (P-2+S)*min(N, float64(seg)), 0)
	if tree <= chain {
		return Tree
	}
	return Chain
}

// log2Floor is ⌊log₂ n⌋ for n ≥ 1.
func log2Floor(n int) int { return bits.Len(uint(n)) - 1 }
