package schedule

import (
	"fmt"
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
}

// DefaultCost is the model with every default filled in: a rough model of
// loopback QUIC on a 2-core machine (one-way latency of tens of µs, about
// 1 GB/s per link); it is not calibrated per transport yet.
var DefaultCost = CostModel{Latency: 50 * time.Microsecond, BytesPerSec: 1e9, ReduceBytesPerSec: 4e9}

// WithDefaults returns m with every zero field replaced by its default.
func (m CostModel) WithDefaults() CostModel {
	if m.Latency == 0 {
		m.Latency = DefaultCost.Latency
	}
	if m.BytesPerSec == 0 {
		m.BytesPerSec = DefaultCost.BytesPerSec
	}
	if m.ReduceBytesPerSec == 0 {
		m.ReduceBytesPerSec = DefaultCost.ReduceBytesPerSec
	}
	return m
}

// Validate says what is wrong with m, after its defaults: a negative
// latency or a negative rate.
func (m CostModel) Validate() error {
	m = m.WithDefaults()
	if m.Latency < 0 || m.BytesPerSec <= 0 || m.ReduceBytesPerSec <= 0 {
		return fmt.Errorf("cost model %+v needs Latency ≥ 0 and positive rates", m)
	}
	return nil
}

// Time is the model's prediction, in seconds, of a critical path of
// messages frames, bytes moved over one link and reduced bytes.
func (m CostModel) Time(messages, bytes, reduced float64) float64 {
	m = m.WithDefaults()
	return messages*m.Latency.Seconds() + bytes/m.BytesPerSec + reduced/m.ReduceBytesPerSec
}

// Algorithm names a schedule the model can pick.
type Algorithm uint8

const (
	// Ring is RingAllReduce.
	Ring Algorithm = iota + 1
	// Doubling is DoublingAllReduce.
	Doubling
	// Tree is TreeBroadcast.
	Tree
	// Chain is ChainBroadcast.
	Chain
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
	N, P := float64(n), float64(p)
	ring := m.Time(2*(P-1), 2*(P-1)/P*N, (P-1)/P*N)
	steps := float64(log2Floor(p))
	if p&(p-1) != 0 {
		steps += 2
	}
	doubling := m.Time(steps, steps*N, steps*N)
	if doubling <= ring {
		return Doubling
	}
	return Ring
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
