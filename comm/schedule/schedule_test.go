package schedule

import (
	"fmt"
	"testing"
)

// collective is one schedule under test: how to build it, what the buffers
// hold before, and what recv must hold after on every rank.
type collective struct {
	name string
	// lens gives the lengths of rank r's send and recv for n.
	lens  func(P, r, n int) (send, recv int)
	build func(P, r, n, seg, root int) Schedule
	// rooted: the schedule has a root (run with several).
	rooted bool
	// bcastRoot: the root's recv holds its data before (Broadcast).
	bcastRoot bool
	// pow2: the schedule runs on a power of two of ranks only.
	pow2 bool
	want func(w *world, r, n, root int) error
}

// a2aCounts is an uneven all-to-all matrix, zeros included: rank i sends
// c[i][j] elements to rank j.
func a2aCounts(P, n int) [][]int {
	c := make([][]int, P)
	for i := range c {
		c[i] = make([]int, P)
		for j := range c[i] {
			c[i][j] = (i*7 + j*3 + n) % (n + 1)
		}
	}
	return c
}

func column(c [][]int, j int) []int {
	col := make([]int, len(c))
	for i := range c {
		col[i] = c[i][j]
	}
	return col
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// reduced checks that x is element idx of the reduction of the ranks in
// mask, finished for Avg when fin.
func reduced(x val, idx int, mask uint64, fin bool) error {
	switch {
	case !x.ok:
		return fmt.Errorf("element %d undefined", idx)
	case x.idx != idx || x.mask != mask || x.ident:
		return fmt.Errorf("element %d holds element %d of ranks %b, want ranks %b", idx, x.idx, x.mask, mask)
	case x.fin != fin && mask != 1: // Avg over one rank may skip its division by 1
		return fmt.Errorf("element %d: Avg finished %v, want %v", idx, x.fin, fin)
	}
	return nil
}

func untouched(recv []val) error {
	for i, x := range recv {
		if x.ok {
			return fmt.Errorf("recv[%d] written on a rank that receives nothing", i)
		}
	}
	return nil
}

var collectives = []collective{
	{
		name:  "RingAllReduce",
		lens:  func(P, r, n int) (int, int) { return n, n },
		build: func(P, r, n, seg, root int) Schedule { return RingAllReduce(P, r, n, seg) },
		want:  wantAllReduce,
	},
	{
		name:  "DoublingAllReduce",
		lens:  func(P, r, n int) (int, int) { return n, n },
		build: func(P, r, n, seg, root int) Schedule { return DoublingAllReduce(P, r, n, seg) },
		want:  wantAllReduce,
	},
	{
		name:  "RingReduceScatter",
		lens:  func(P, r, n int) (int, int) { return P * n, n },
		build: func(P, r, n, seg, root int) Schedule { return RingReduceScatter(P, r, n, seg) },
		want: func(w *world, r, n, root int) error {
			for i, x := range w.ranks[r].recv {
				if err := reduced(x, r*n+i, fullMask(w.P), w.P > 1); err != nil {
					return err
				}
			}
			return nil
		},
	},
	{
		name:  "DoublingReduceScatter",
		lens:  func(P, r, n int) (int, int) { return P * n, n },
		build: func(P, r, n, seg, root int) Schedule { return DoublingReduceScatter(P, r, n, seg) },
		want: func(w *world, r, n, root int) error {
			for i, x := range w.ranks[r].recv {
				if err := reduced(x, r*n+i, fullMask(w.P), w.P > 1); err != nil {
					return err
				}
			}
			return nil
		},
	},
	{
		name:  "HalvingReduceScatter",
		lens:  func(P, r, n int) (int, int) { return P * n, n },
		build: func(P, r, n, seg, root int) Schedule { return HalvingReduceScatter(P, r, n, seg) },
		pow2:  true,
		want: func(w *world, r, n, root int) error {
			for i, x := range w.ranks[r].recv {
				if err := reduced(x, r*n+i, fullMask(w.P), w.P > 1); err != nil {
					return err
				}
			}
			return nil
		},
	},
	{
		name:  "RingAllGather",
		lens:  func(P, r, n int) (int, int) { return n, P * n },
		build: func(P, r, n, seg, root int) Schedule { return RingAllGather(P, r, n, seg) },
		want: func(w *world, r, n, root int) error {
			return wantBlocks(w.ranks[r].recv, w.P, n, func(j, i int) val { return leaf(j, i) })
		},
	},
	{
		name:      "TreeBroadcast",
		lens:      func(P, r, n int) (int, int) { return 0, n },
		build:     TreeBroadcastAt,
		bcastRoot: true,
		rooted:    true,
		want:      wantBroadcast,
	},
	{
		name:      "ChainBroadcast",
		lens:      func(P, r, n int) (int, int) { return 0, n },
		build:     ChainBroadcastAt,
		bcastRoot: true,
		rooted:    true,
		want:      wantBroadcast,
	},
	{
		name:   "BinomialReduce",
		rooted: true,
		lens:   func(P, r, n int) (int, int) { return n, n },
		build:  func(P, r, n, seg, root int) Schedule { return BinomialReduce(P, r, root, n, seg) },
		want: func(w *world, r, n, root int) error {
			if r != root {
				return untouched(w.ranks[r].recv)
			}
			for i, x := range w.ranks[r].recv {
				if err := reduced(x, i, fullMask(w.P), w.P > 1); err != nil {
					return err
				}
			}
			return nil
		},
	},
	{
		name: "PairwiseAllToAll",
		lens: func(P, r, n int) (int, int) { return P * n, P * n },
		build: func(P, r, n, seg, root int) Schedule {
			c := make([]int, P)
			for i := range c {
				c[i] = n
			}
			return PairwiseAllToAll(P, r, c, c, seg, false)
		},
		want: func(w *world, r, n, root int) error {
			return wantBlocks(w.ranks[r].recv, w.P, n, func(j, i int) val { return leaf(j, r*n+i) })
		},
	},
	{
		name: "PairwiseAllToAllV",
		lens: func(P, r, n int) (int, int) {
			c := a2aCounts(P, n)
			return sum(c[r]), sum(column(c, r))
		},
		build: func(P, r, n, seg, root int) Schedule {
			c := a2aCounts(P, n)
			return PairwiseAllToAll(P, r, c[r], column(c, r), seg, true)
		},
		want: func(w *world, r, n, root int) error {
			c := a2aCounts(w.P, n)
			recv := w.ranks[r].recv
			k := 0
			for j := range w.P {
				from := offsets(c[j])[r]
				for i := range c[j][r] {
					if recv[k] != leaf(j, from+i) {
						return fmt.Errorf("recv[%d] (element %d from rank %d) holds element %d of ranks %b", k, i, j, recv[k].idx, recv[k].mask)
					}
					k++
				}
			}
			return nil
		},
	},
	{
		name:   "Gather",
		rooted: true,
		lens:   func(P, r, n int) (int, int) { return n, P * n },
		build:  func(P, r, n, seg, root int) Schedule { return Gather(P, r, root, n, seg) },
		want: func(w *world, r, n, root int) error {
			if r != root {
				return untouched(w.ranks[r].recv)
			}
			return wantBlocks(w.ranks[r].recv, w.P, n, func(j, i int) val { return leaf(j, i) })
		},
	},
	{
		name:   "Scatter",
		rooted: true,
		lens:   func(P, r, n int) (int, int) { return P * n, n },
		build:  func(P, r, n, seg, root int) Schedule { return Scatter(P, r, root, n, seg) },
		want: func(w *world, r, n, root int) error {
			return wantBlocks(w.ranks[r].recv, 1, n, func(_, i int) val { return leaf(root, r*n+i) })
		},
	},
	{
		name:  "Scan",
		lens:  func(P, r, n int) (int, int) { return n, n },
		build: func(P, r, n, seg, root int) Schedule { return Scan(P, r, n, seg, false) },
		want: func(w *world, r, n, root int) error {
			for i, x := range w.ranks[r].recv {
				if err := reduced(x, i, 1<<(r+1)-1, false); err != nil {
					return err
				}
			}
			return nil
		},
	},
	{
		name:  "ExScan",
		lens:  func(P, r, n int) (int, int) { return n, n },
		build: func(P, r, n, seg, root int) Schedule { return Scan(P, r, n, seg, true) },
		want: func(w *world, r, n, root int) error {
			for i, x := range w.ranks[r].recv {
				if r == 0 {
					if !x.ok || !x.ident {
						return fmt.Errorf("rank 0 element %d is not the identity", i)
					}
					continue
				}
				if err := reduced(x, i, 1<<r-1, false); err != nil {
					return err
				}
			}
			return nil
		},
	},
	{
		name:  "Barrier",
		lens:  func(P, r, n int) (int, int) { return 0, 0 },
		build: func(P, r, n, seg, root int) Schedule { return Barrier(P, r) },
		want: func(w *world, r, n, root int) error {
			if k := w.ranks[r].know; k != fullMask(w.P) {
				return fmt.Errorf("left the barrier having heard from ranks %b only", k)
			}
			return nil
		},
	},
}

// TreeBroadcastAt and ChainBroadcastAt adapt the broadcasts to the table's
// argument order.
func TreeBroadcastAt(P, r, n, seg, root int) Schedule  { return TreeBroadcast(P, r, root, n, seg) }
func ChainBroadcastAt(P, r, n, seg, root int) Schedule { return ChainBroadcast(P, r, root, n, seg) }

func wantAllReduce(w *world, r, n, root int) error {
	for i, x := range w.ranks[r].recv {
		if err := reduced(x, i, fullMask(w.P), w.P > 1); err != nil {
			return err
		}
		if x.h != w.ranks[0].recv[i].h {
			return fmt.Errorf("element %d computed in another order than on rank 0: the bits may differ", i)
		}
	}
	return nil
}

func wantBroadcast(w *world, r, n, root int) error {
	return wantBlocks(w.ranks[r].recv, 1, n, func(_, i int) val { return leaf(root, i) })
}

// wantBlocks checks that recv is P blocks of n elements, element i of block
// j being want(j, i).
func wantBlocks(recv []val, P, n int, want func(j, i int) val) error {
	for j := range P {
		for i := range n {
			if x := recv[j*n+i]; x != want(j, i) {
				return fmt.Errorf("block %d element %d holds element %d of ranks %b", j, i, x.idx, x.mask)
			}
		}
	}
	return nil
}

// run simulates c on P ranks with n elements, segments of seg, root.
func (c collective) run(P, n, seg, root int) error {
	w, err := simulate(P,
		func(r int) Schedule { return c.build(P, r, n, seg, root) },
		func(r int) []val {
			sn, _ := c.lens(P, r, n)
			s := make([]val, sn)
			for i := range s {
				s[i] = leaf(r, i)
			}
			return s
		},
		func(r int) []val {
			_, rn := c.lens(P, r, n)
			v := make([]val, rn)
			if c.bcastRoot && r == root {
				for i := range v {
					v[i] = leaf(r, i)
				}
			}
			return v
		})
	if err != nil {
		return err
	}
	for r := range P {
		if err := c.want(w, r, n, root); err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// TestSchedules runs every schedule on every world of 1 to 64 ranks, with
// counts that the world divides and counts it does not, counts below the
// world size, one and several segments, and several roots.
func TestSchedules(t *testing.T) {
	last := 64
	if raceOn {
		last = 8
	}
	for P := 1; P <= last; P++ {
		t.Run(fmt.Sprint(P), func(t *testing.T) {
			t.Parallel()
			counts := []int{0, 1, 2, P - 1, P, P + 1, 2*P + 3, 37}
			segs := []int{1, 4, 1 << 20}
			switch {
			case testing.Short() && P > 16:
				counts, segs = []int{P - 1, 2*P + 3}, []int{3}
			case P > 16:
				counts, segs = []int{0, 1, P - 1, P + 1, 2*P + 3}, []int{4}
			}
			for _, c := range collectives {
				if c.pow2 && P&(P-1) != 0 {
					continue
				}
				roots := []int{0}
				if c.rooted {
					roots = []int{0, P - 1, P / 2}
				}
				for _, n := range counts {
					for _, seg := range segs {
						for _, root := range roots {
							if err := c.run(P, max(n, 0), seg, root); err != nil {
								t.Fatalf("%s P=%d n=%d seg=%d root=%d: %v", c.name, P, n, seg, root, err)
							}
						}
					}
				}
			}
		})
	}
}

// FuzzSchedules runs one schedule on a world, count, segment and root the
// fuzzer picks.
func FuzzSchedules(f *testing.F) {
	f.Add(uint8(0), uint8(5), uint16(7), uint8(2), uint8(1))
	f.Add(uint8(4), uint8(64), uint16(129), uint8(1), uint8(63))
	f.Fuzz(func(t *testing.T, which, p uint8, n uint16, seg, root uint8) {
		c := collectives[int(which)%len(collectives)]
		P := 1 + int(p)%64
		if c.pow2 {
			P = 1 << (int(p) % 7)
		}
		if err := c.run(P, int(n)%300, 1+int(seg), int(root)%P); err != nil {
			t.Fatalf("%s P=%d: %v", c.name, P, err)
		}
	})
}

// TestSimulatorCatches makes sure the simulator can fail: a world where
// every rank first waits for its left neighbour deadlocks, a schedule that
// reduces a block twice is caught.
func TestSimulatorCatches(t *testing.T) {
	none := func(int) []val { return nil }
	_, err := simulate(3, func(r int) Schedule {
		var b builder
		b.recv(0, -1, mod(r-1, 3), 0, Range{Buf: RecvBuf}, Copy)
		b.send(0, -1, mod(r+1, 3), 0, Range{Buf: RecvBuf})
		return b.done()
	}, none, none)
	if err == nil {
		t.Error("a cyclic wait was not reported as a deadlock")
	}
	two := func(r int) []val { return []val{leaf(r, 0)} }
	_, err = simulate(2, func(r int) Schedule {
		var b builder
		b.local(0, -1, whole(RecvBuf, 1), whole(SendBuf, 1), Copy, false)
		b.send(0, -1, 1-r, 0, whole(RecvBuf, 1))
		b.recv(0, -1, 1-r, 0, whole(RecvBuf, 1), Reduce)
		b.local(0, -1, whole(RecvBuf, 1), whole(SendBuf, 1), Reduce, false)
		return b.done()
	}, two, two)
	if err == nil {
		t.Error("a contribution reduced twice was not reported")
	}
}

// TestCheckRefuses: Check catches the broken promises a runtime would hang
// or race on.
func TestCheckRefuses(t *testing.T) {
	two := func(steps ...Step) Schedule { return Schedule{Steps: steps, Lanes: 2, Waited: []bool{true, false}} }
	for name, s := range map[string]Schedule{
		"own lane":      two(Step{Lane: 0, After: -1}, Step{Lane: 0, After: 0}),
		"bad lane":      two(Step{Lane: 2, After: -1}),
		"backwards":     two(Step{Lane: 0, After: -1}, Step{Lane: 0, After: -1}, Step{Lane: 1, After: 1}, Step{Lane: 1, After: 0}),
		"not marked":    {Steps: []Step{{Lane: 1, After: -1}, {Lane: 0, After: 0}}, Lanes: 2, Waited: []bool{true, false}},
		"two waiters":   {Steps: []Step{{Lane: 0, After: -1}, {Lane: 1, After: 0}, {Lane: 2, After: 0}}, Lanes: 3, Waited: []bool{true, false, false}},
		"free non-temp": two(Step{Lane: 0, After: -1, Src: Range{Buf: RecvBuf}, Free: true}),
	} {
		if s.Check() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
