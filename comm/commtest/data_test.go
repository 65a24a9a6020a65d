package commtest

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// The exact domains must make the result independent of how an
// implementation reduces: accumulating in the dtype itself (rounding after
// every step) in rank order, in reverse, or as a tree, and dividing for Avg
// in float32 (float64 for f64) and rounding again, must all give the
// reference's bits.
func TestExactRegardlessOfOrder(t *testing.T) {
	const n = 600
	for _, size := range []int{2, 3, 5, 8, 16, 300} {
		for _, dt := range []comm.DType{comm.F16, comm.BF16, comm.F32, comm.F64, comm.F8E4M3, comm.F8E5M2} {
			for _, op := range comm.ReduceOps {
				if !reduceOK(comm.KindAllReduce, dt, op) {
					continue
				}
				tc := newCase(comm.KindAllReduce, dt, op, n, 0, plain)
				s := newSource(&tc, size)
				e := s.e
				want := s.reduction(op, 0, size, 0, n, size)
				vals := make([][]float64, size)
				for q := range vals {
					vals[q] = make([]float64, n)
					s.vals(vals[q], q, 0)
					for i, v := range vals[q] {
						if e.toFloat(e.fromFloat(v)) != v {
							t.Fatalf("%v size %d: input %v of rank %d is not a %v", tc.name, size, v, q, dt)
						}
						if op == comm.PreMulSum { // each rank's product, rounded once
							vals[q][i] = e.toFloat(e.fromFloat(v * premulScalar(q)))
							if vals[q][i] != v*premulScalar(q) {
								t.Fatalf("%v size %d: input %v × %v of rank %d is not exact", tc.name, size, v, premulScalar(q), q)
							}
						}
					}
				}
				round := func(f float64) float64 { return e.toFloat(e.fromFloat(f)) }
				combine := func(a, b float64) float64 {
					switch op {
					case comm.Prod:
						return round(a * b)
					case comm.Min:
						return math.Min(a, b)
					case comm.Max:
						return math.Max(a, b)
					}
					return round(a + b)
				}
				var tree func(i int, ranks []int) float64
				tree = func(i int, ranks []int) float64 {
					if len(ranks) == 1 {
						return vals[ranks[0]][i]
					}
					h := len(ranks) / 2
					return combine(tree(i, ranks[:h]), tree(i, ranks[h:]))
				}
				ranks := make([]int, size)
				for q := range ranks {
					ranks[q] = q
				}
				reversed := slices.Clone(ranks)
				slices.Reverse(reversed)
				for _, order := range []struct {
					name string
					at   func(i int) float64
				}{
					{"rank order", func(i int) float64 {
						acc := vals[0][i]
						for _, q := range ranks[1:] {
							acc = combine(acc, vals[q][i])
						}
						return acc
					}},
					{"reverse", func(i int) float64 {
						acc := vals[size-1][i]
						for _, q := range reversed[1:] {
							acc = combine(acc, vals[q][i])
						}
						return acc
					}},
					{"tree", func(i int) float64 { return tree(i, ranks) }},
				} {
					for i := range n {
						got := order.at(i)
						switch {
						case op == comm.Avg && dt == comm.F64:
							got /= float64(size)
						case op == comm.Avg: // in float32, then rounded again
							got = float64(float32(got) / float32(size))
						}
						if g, w := e.fromFloat(got), e.get(want, i); g != w {
							t.Fatalf("%v size %d, %s: index %d: %s, reference %s", tc.name, size, order.name, i, e.format(g), e.format(w))
						}
					}
				}
			}
		}
	}
}

// Inputs must differ between ranks and between indices, or a result in the
// wrong place could still look right.
func TestInputsDistinct(t *testing.T) {
	const n = 2000
	for _, kind := range []comm.Kind{comm.KindAllReduce, comm.KindAllGather} {
		for _, dt := range comm.DTypes {
			for _, op := range comm.ReduceOps {
				if !kind.Reduces() && op != comm.Sum || !reduceOK(kind, dt, op) {
					continue
				}
				tc := newCase(kind, dt, op, n, 0, plain)
				size := 8
				s := newSource(&tc, size)
				a, b := make([]byte, n*s.e.size), make([]byte, n*s.e.size)
				s.fill(a, 0, 0, n)
				s.fill(b, 1, 0, n)
				sameRank, sameIndex := 0, 0
				for i := range n {
					if s.e.get(a, i) == s.e.get(b, i) {
						sameRank++
					}
					if i > 0 && s.e.get(a, i) == s.e.get(a, i-1) {
						sameIndex++
					}
				}
				// Prod on floats draws from 6 values: 1/6 agree by chance. A
				// bool has two values (and is mostly true for Prod, so that
				// ANDs are not all false): its results are placed by the same
				// code as every other dtype's of its size, which tells the
				// places apart. The fp8 Sum domains have as few as 3 values.
				limit := n / 4
				switch {
				case dt == comm.Bool:
					continue
				case dt == comm.F8E4M3 || dt == comm.F8E5M2:
					limit = n / 2
				}
				if sameRank > limit || sameIndex > limit {
					t.Errorf("%s: ranks 0 and 1 agree at %d of %d indices; neighbours at %d", tc.name, sameRank, n, sameIndex)
				}
			}
		}
	}
}

// Every rank must build the same case list, names must be unique, and the
// large subset must be what Options says.
func TestCaseList(t *testing.T) {
	o := Options{}.withDefaults()
	for _, size := range []int{1, 2, 3, 8} {
		cases := buildCases(o, size)
		seen := map[string]bool{}
		large := 0
		for _, tc := range cases {
			if seen[tc.name] {
				t.Fatalf("size %d: case %s twice", size, tc.name)
			}
			seen[tc.name] = true
			if tc.n >= o.LargeCount {
				large++
				if !inLargeSubset(tc.kind, tc.dt, tc.op) {
					t.Errorf("large case %s is outside the subset", tc.name)
				}
			}
		}
		full := o
		full.FullLarge = true
		t.Logf("size %d: %d cases, %d of them large (FullLarge: %d cases)", size, len(cases), large, len(buildCases(full, size)))
	}
	for _, name := range []string{"AllReduce/f32/sum/n=7/inplace", "Reduce/bf16/max/n=1/root=1", "AllReduce/f16/avg/n=7/nan",
		"ExScan/i8/prod/n=0", "AllReduce/f32/avg/n=1000003/random", "SendRecv/u8/n=1000003", "AllToAllV/f64/n=7", "Barrier"} {
		found := false
		for _, tc := range buildCases(o, 3) {
			found = found || tc.name == name
		}
		if !found {
			t.Errorf("no case %s at size 3", name)
		}
	}
	if got := fmt.Sprint(roots(1), roots(2), roots(5)); got != "[0] [0 1] [0 2 4]" {
		t.Errorf("roots = %s", got)
	}
}
