package nexar

import (
	"math/bits"
	"time"
)

// CostModel predicts the time of a schedule as NCCL's tuner does:
// latency × messages on the critical path + bytes / bandwidth + reduced
// bytes / reduction rate. Every rank evaluates it with the same numbers, so
// every rank picks the same algorithm.
type CostModel struct {
	// Latency is the one-way time of a small frame between two ranks.
	Latency time.Duration
	// BytesPerSec is the bandwidth of one link.
	BytesPerSec float64
	// ReduceBytesPerSec is the rate of the reduction kernel.
	ReduceBytesPerSec float64
}

// DefaultCost is a rough model of loopback QUIC on a 2-core machine (one-way
// latency of tens of µs, about 1 GB/s per link); it is not calibrated per
// transport yet. Pass your own for other fabrics: every rank must pass the
// same one.
var DefaultCost = CostModel{Latency: 50 * time.Microsecond, BytesPerSec: 1e9, ReduceBytesPerSec: 4e9}

func (m CostModel) t(messages, bytes, reduced float64) float64 {
	return messages*m.Latency.Seconds() + bytes/m.BytesPerSec + reduced/m.ReduceBytesPerSec
}

// ceilLog2 is ⌈log₂ n⌉ for n ≥ 1.
func ceilLog2(n int) int { return bits.Len(uint(n - 1)) }

type allReduceAlgo uint8

const (
	algoRing allReduceAlgo = iota + 1
	algoDoubling
)

// allReduce picks the AllReduce schedule for n bytes on p ranks.
func (m CostModel) allReduce(n, p int) allReduceAlgo {
	if p <= 1 {
		return algoDoubling
	}
	N, P := float64(n), float64(p)
	ring := m.t(2*(P-1), 2*(P-1)/P*N, (P-1)/P*N)
	steps := float64(bits.Len(uint(p)) - 1) // log₂ of the largest power of two ≤ p
	if p&(p-1) != 0 {
		steps += 2 // fold in and out the ranks beyond the power of two
	}
	doubling := m.t(steps, steps*N, steps*N)
	if doubling <= ring {
		return algoDoubling
	}
	return algoRing
}

type broadcastAlgo uint8

const (
	algoTree broadcastAlgo = iota + 1
	algoChain
)

// broadcast picks the Broadcast schedule for n bytes on p ranks cut in
// segments of seg bytes.
func (m CostModel) broadcast(n, p, seg int) broadcastAlgo {
	if p <= 2 {
		return algoChain
	}
	N, P := float64(n), float64(p)
	steps := float64(ceilLog2(p))
	tree := m.t(steps, steps*N, 0)
	S := float64(max(1, (n+seg-1)/seg))
	chain := m.t(P-2+S, (P-2+S)*min(N, float64(seg)), 0)
	if tree <= chain {
		return algoTree
	}
	return algoChain
}
