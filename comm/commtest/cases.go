package commtest

import (
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/hiercomm/hiercomm/comm"
)

// variant is how a case's data or buffers differ from the plain form.
type variant uint8

const (
	plain   variant = iota
	inPlace         // send and recv share memory as comm.Call allows
	withNaN         // one rank has NaN at every third index
	random          // random floats: not exact; every rank must get the same bits
)

var variantNames = [...]string{"", "inplace", "nan", "random"}

// testCase is one operation of a suite, the same on every rank.
type testCase struct {
	name string
	kind comm.Kind // KindSend stands for the Send/Recv ring
	dt   comm.DType
	op   comm.ReduceOp
	n    int // per-rank count, as in comm.Call's layout
	root int
	v    variant
	seed uint64 // from the name: the data of the case
	// large: n ≥ Options.LargeCount; a random case then checks bit-identity
	// across ranks only, not the tolerance (which costs size·n per rank).
	large bool
}

func newCase(kind comm.Kind, dt comm.DType, op comm.ReduceOp, n, root int, v variant) testCase {
	tc := testCase{kind: kind, dt: dt, op: op, n: n, root: root, v: v}
	tc.rename(caseName(tc))
	return tc
}

// rename gives tc a name, and the data that goes with it.
func (tc *testCase) rename(name string) {
	tc.name = name
	h := fnv.New64a()
	h.Write([]byte(name))
	tc.seed = h.Sum64()
}

// caseName is e.g. "AllReduce/f32/sum/n=7/inplace/root=1"; the Send/Recv
// ring is "SendRecv/f32/n=7".
func caseName(tc testCase) string {
	s := tc.kind.String()
	if tc.kind == comm.KindSend || tc.kind == comm.KindRecv {
		s = "SendRecv"
	}
	if tc.kind == comm.KindBarrier {
		return s
	}
	s += "/" + tc.dt.String()
	if tc.kind.Reduces() {
		s += "/" + tc.op.String()
	}
	s += fmt.Sprintf("/n=%d", tc.n)
	if tc.v != plain {
		s += "/" + variantNames[tc.v]
	}
	if tc.kind.Rooted() {
		s += fmt.Sprintf("/root=%d", tc.root)
	}
	return s
}

// The representative subsets for large counts. AllReduce, the collective
// that matters most, gets every op on f32 and the common mixes elsewhere;
// the other kinds get one case per element size (plus f32 max, since
// comparison kernels differ from arithmetic ones): what large counts add is
// chunking, pipelining and placement, which depend on the element size more
// than on the op. The data-moving kinds whose buffers grow with the world
// (size·n) get the extreme element sizes only.
var (
	largeAllReduce = map[comm.DType][]comm.ReduceOp{
		comm.F32:    comm.ReduceOps,
		comm.BF16:   {comm.Sum, comm.Max},
		comm.F16:    {comm.Sum, comm.Max},
		comm.I64:    {comm.Sum, comm.Min},
		comm.U8:     {comm.Max},
		comm.F64:    {comm.Avg, comm.PreMulSum}, // NCCL's one-rank kernel for both drops f64 elements before 2.29.7
		comm.I16:    {comm.BXor},
		comm.Bool:   {comm.Sum},
		comm.F8E5M2: {comm.Sum},
	}
	largeReduce = map[comm.DType][]comm.ReduceOp{
		comm.F32:  {comm.Sum, comm.Max},
		comm.BF16: {comm.Sum},
		comm.I64:  {comm.Min},
		comm.U8:   {comm.Max},
	}
	largeMove      = []comm.DType{comm.U8, comm.BF16, comm.F32, comm.I64}
	largeMoveWorld = []comm.DType{comm.U8, comm.F32}
)

// inLargeSubset reports whether a large case of kind on dt with op runs
// when Options.FullLarge is off.
func inLargeSubset(kind comm.Kind, dt comm.DType, op comm.ReduceOp) bool {
	switch kind {
	case comm.KindAllReduce:
		return slices.Contains(largeAllReduce[dt], op)
	case comm.KindReduce, comm.KindReduceScatter, comm.KindScan, comm.KindExScan:
		return slices.Contains(largeReduce[dt], op)
	case comm.KindAllGather, comm.KindAllToAll, comm.KindAllToAllV:
		return slices.Contains(largeMoveWorld, dt)
	}
	return slices.Contains(largeMove, dt)
}

// roots are the roots a rooted case runs with: 0, size-1 and a middle one.
func roots(size int) []int {
	r := []int{0}
	if size > 2 {
		r = append(r, size/2)
	}
	if size > 1 {
		r = append(r, size-1)
	}
	return r
}

// reduceOK reports whether op on dt is a valid case of kind (comm.CanReduce:
// Avg and PreMulSum only on floats, the bitwise ops only on integers and
// bool; and Avg not for the scans).
func reduceOK(kind comm.Kind, dt comm.DType, op comm.ReduceOp) bool {
	if comm.CanReduce(dt, op) != nil {
		return false
	}
	return op != comm.Avg || kind != comm.KindScan && kind != comm.KindExScan
}

// buildCases is the case list of RunRank for a world of the given size. It
// depends only on o and size, so every rank builds the same list.
func buildCases(o Options, size int) []testCase {
	var out []testCase
	add := func(tc testCase) {
		tc.large = tc.n >= o.LargeCount
		out = append(out, tc)
	}
	seen := map[comm.Kind]bool{}
	for _, kind := range o.Kinds {
		if kind == comm.KindRecv {
			kind = comm.KindSend
		}
		if seen[kind] {
			continue
		}
		seen[kind] = true
		if kind == comm.KindBarrier {
			add(newCase(kind, 0, 0, 0, 0, plain))
			continue
		}
		for _, dt := range o.DTypes {
			for _, n := range o.Counts {
				large := n >= o.LargeCount && !o.FullLarge
				rs := roots(size)
				if large {
					rs = rs[len(rs)-1:]
				}
				if !kind.Rooted() {
					rs = []int{0}
				}
				if !kind.Reduces() {
					if large && !inLargeSubset(kind, dt, 0) {
						continue
					}
					for _, root := range rs {
						add(newCase(kind, dt, 0, n, root, plain))
					}
					if kind == comm.KindAllGather && (!large || dt == comm.F32) {
						add(newCase(kind, dt, 0, n, 0, inPlace))
					}
					continue
				}
				for _, op := range o.Ops {
					if !reduceOK(kind, dt, op) || large && !inLargeSubset(kind, dt, op) {
						continue
					}
					for _, root := range rs {
						add(newCase(kind, dt, op, n, root, plain))
					}
					if !large || dt == comm.F32 && op == comm.Sum {
						add(newCase(kind, dt, op, n, rs[len(rs)-1], inPlace))
					}
					if dt.IsFloat() && n > 0 && !large {
						add(newCase(kind, dt, op, n, rs[len(rs)-1], withNaN))
					}
					if kind == comm.KindAllReduce && dt.IsFloat() && (op == comm.Sum || op == comm.Avg) {
						add(newCase(kind, dt, op, n, 0, random))
					}
				}
			}
		}
	}
	return out
}
