package tier

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/hiercomm/hiercomm/comm"
)

// The reduction kernels against the two ceilings that matter: copy() of the
// same bytes (what memory can do) and the plain loop d[i] += s[i] on float32
// (what a straightforward Go reduction does). Run with
//
//	go test -run '^$' -bench . -benchtime 20x -count 3 ./comm/
//
// and compare MB/s; docs/reductions.md has the table of the last run.

var kernelBenchSizes = []struct {
	name  string
	bytes int
}{{"4MiB", 4 << 20}, {"64MiB", 64 << 20}}

// benchBufs returns two buffers of n bytes, 8-byte aligned, every page
// written (memory never written maps the shared zero page, which a copy
// reads from cache: too fast to be true).
func benchBufs(n int) (dst, src []byte) {
	a := make([]uint64, n/8)
	b := make([]uint64, n/8)
	for i := range a {
		a[i], b[i] = uint64(i), ^uint64(i)
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&a[0])), n), unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), n)
}

func BenchmarkCopy(b *testing.B) {
	for _, sz := range kernelBenchSizes {
		b.Run(sz.name, func(b *testing.B) {
			dst, src := benchBufs(sz.bytes)
			b.SetBytes(int64(sz.bytes))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

// plainLoop is the baseline the kernels are held to.
func plainLoop(d, s []float32) {
	s = s[:len(d)]
	for i := range d {
		d[i] += s[i]
	}
}

func BenchmarkPlainLoop(b *testing.B) {
	for _, sz := range kernelBenchSizes {
		b.Run(sz.name, func(b *testing.B) {
			dst, src := benchBufs(sz.bytes)
			fillBench(comm.F32, comm.Sum, dst, src)
			d, s := view[float32](dst), view[float32](src)
			b.SetBytes(int64(sz.bytes))
			for b.Loop() {
				plainLoop(d, s)
			}
		})
	}
}

func BenchmarkReduce(b *testing.B) {
	bufs := map[int][2][]byte{}
	for _, dt := range comm.DTypes {
		for _, op := range comm.ReduceOps {
			kernel, err := ReduceFunc(dt, op)
			if err != nil {
				continue // avg on integers
			}
			for _, sz := range kernelBenchSizes {
				b.Run(dt.String()+"/"+op.String()+"/"+sz.name, func(b *testing.B) {
					if _, ok := bufs[sz.bytes]; !ok {
						dst, src := benchBufs(sz.bytes)
						bufs[sz.bytes] = [2][]byte{dst, src}
					}
					dst, src := bufs[sz.bytes][0], bufs[sz.bytes][1]
					fillBench(dt, op, dst, src)
					b.SetBytes(int64(sz.bytes))
					for b.Loop() {
						kernel(dst, src)
					}
				})
			}
		}
	}
}

// fillBench fills dst and src with values that stay ordinary over the
// iterations of a benchmark (no overflow to Inf, no subnormals, which are
// slow on some CPUs and would measure the exception, not the kernel): dst in
// [-1, 1], src in [-1, 1] for Sum and ±1 for Prod, so that repeated steps
// neither grow nor shrink much. A 64 KiB pattern is repeated.
func fillBench(dt comm.DType, op comm.ReduceOp, dst, src []byte) {
	const pattern = 64 << 10
	rng := rand.New(rand.NewPCG(1, uint64(dt)<<8|uint64(op)))
	n := pattern / dt.Size()
	pd, ps := make([]float64, n), make([]float64, n)
	for i := range n {
		pd[i] = rng.Float64()*2 - 1
		ps[i] = rng.Float64()*2 - 1
		if op == comm.Prod {
			ps[i] = float64(1 - 2*rng.IntN(2))
		}
	}
	enc := func(out []byte, v []float64) {
		switch dt {
		case comm.F32:
			for i, x := range v {
				view[float32](out)[i] = float32(x)
			}
		case comm.F64:
			copy(view[float64](out), v)
		case comm.F16:
			for i, x := range v {
				view[comm.Float16](out)[i] = comm.Float16FromFloat64(x)
			}
		case comm.BF16:
			for i, x := range v {
				view[comm.BFloat16](out)[i] = comm.BFloat16FromFloat64(x)
			}
		case comm.F8E4M3:
			for i, x := range v {
				out[i] = byte(comm.Float8E4M3FromFloat64(x))
			}
		case comm.F8E5M2:
			for i, x := range v {
				out[i] = byte(comm.Float8E5M2FromFloat64(x))
			}
		case comm.Bool:
			for i, x := range v {
				out[i] = byte(math.Float64bits(x) >> 20 & 1)
			}
		default: // integers: random bits, wrapping is part of the job
			for i := range out {
				out[i] = byte(math.Float64bits(v[i%len(v)]) >> 20)
			}
		}
	}
	enc(dst[:pattern], pd)
	enc(src[:pattern], ps)
	for filled := pattern; filled < len(dst); filled *= 2 {
		copy(dst[filled:], dst[:filled])
		copy(src[filled:], src[:filled])
	}
}
