package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// chanWorld is a minimal in-process Communicator for these tests: N ranks
// that implement AllReduce only. Rank r's k-th Start joins rendezvous k; the
// last rank to arrive reduces in rank order (with the kernels under test) or
// decides the error, and closes the rendezvous's channel, which every rank's
// Work waits on. Like a real implementation, it validates each call on its
// own rank, reports a bad call to the others, and compares Signatures.
type chanWorld struct {
	size int

	mu     sync.Mutex // guards rounds
	rounds map[uint64]*chanRound
}

type chanRound struct {
	arrived int
	data    [][]byte         // each rank's send bytes
	errs    []error          // each rank's own validation error
	sigs    []comm.Signature // each rank's call
	done    chan struct{}
	result  []byte  // the reduction, once done
	rankErr []error // each rank's error, once done
}

type chanComm struct {
	tier.Blocking
	localControl
	world *chanWorld
	rank  int
	seq   atomic.Uint64
}

func newChanWorld(size int) []*chanComm {
	w := &chanWorld{size: size, rounds: map[uint64]*chanRound{}}
	comms := make([]*chanComm, size)
	for r := range comms {
		comms[r] = &chanComm{world: w, rank: r}
		comms[r].Blocking = tier.Blocking{S: comms[r]}
	}
	return comms
}

// sequences is the number of collectives started so far (by any rank).
func (w *chanWorld) sequences() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.rounds)
}

func (c *chanComm) Rank() int { return c.rank }
func (c *chanComm) Size() int { return c.world.size }
func (c *chanComm) Split(context.Context, int, int) (comm.Communicator, error) {
	return nil, errors.New("chanComm: no Split")
}
func (c *chanComm) Close() error { return nil }

func (c *chanComm) Start(ctx context.Context, call comm.Call) *comm.Work {
	if call.Kind != comm.KindAllReduce {
		return comm.Failed(&comm.ArgError{Kind: call.Kind, Arg: "kind", Problem: "chanComm runs AllReduce only"})
	}
	seq := c.seq.Add(1)
	verr := tier.Validate(ctx, call, c.rank, c.world.size)
	var data []byte
	if verr == nil {
		data = append([]byte{}, call.Send.Bytes()...)
	}
	w := c.world
	w.mu.Lock()
	r := w.rounds[seq]
	if r == nil {
		r = &chanRound{data: make([][]byte, w.size), errs: make([]error, w.size), sigs: make([]comm.Signature, w.size),
			done: make(chan struct{})}
		w.rounds[seq] = r
	}
	r.data[c.rank], r.errs[c.rank], r.sigs[c.rank] = data, verr, call.Signature()
	r.arrived++
	if r.arrived == w.size {
		r.finish(call.Op)
	}
	w.mu.Unlock()

	work := comm.NewWork()
	go func() {
		select {
		case <-ctx.Done():
			work.Complete(&comm.OpError{Rank: c.rank, Peer: -1, Kind: comm.KindAllReduce, Seq: seq, Err: tier.ContextError(ctx.Err())})
		case <-r.done:
			if err := r.rankErr[c.rank]; err != nil {
				// A real transport may leave a partial result behind when it
				// fails; scribble over recv so that a caller that trusts it shows.
				for i := range call.Recv.Bytes() {
					call.Recv.Bytes()[i] = 0xee
				}
				work.Complete(&comm.OpError{Rank: c.rank, Peer: -1, Kind: comm.KindAllReduce, Seq: seq, Err: err})
				return
			}
			copy(call.Recv.Bytes(), r.result)
			work.Complete(nil)
		}
	}()
	return work
}

// finish decides the round: each rank's own argument error, else a peer's,
// else a mismatch, else the reduction in rank order.
func (r *chanRound) finish(op comm.ReduceOp) {
	defer close(r.done)
	r.rankErr = make([]error, len(r.data))
	for bad, err := range r.errs {
		if err == nil {
			continue
		}
		for rank := range r.rankErr {
			if r.errs[rank] != nil {
				r.rankErr[rank] = r.errs[rank]
			} else {
				r.rankErr[rank] = &comm.RemoteError{Peer: bad, Reason: err.Error()}
			}
		}
		return
	}
	for rank, sig := range r.sigs {
		if sig != r.sigs[0] {
			for me := range r.rankErr {
				peer := rank
				if me == rank {
					peer = 0
				}
				r.rankErr[me] = &comm.MismatchError{Peer: peer, Local: r.sigs[me], Remote: r.sigs[peer]}
			}
			return
		}
	}
	dt := r.sigs[0].DType
	kernel, err := tier.ReduceFunc(dt, op)
	if err != nil {
		panic(err) // Validate checked it
	}
	r.result = append([]byte{}, r.data[0]...)
	for _, d := range r.data[1:] {
		kernel(r.result, d)
	}
	if op == comm.Avg {
		tier.FinishAvg(dt, r.result, len(r.data))
	}
}

// onEveryRank runs f on every rank at once and returns their errors.
func onEveryRank(comms []*chanComm, f func(c *chanComm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Go(func() { errs[i] = f(c) })
	}
	wg.Wait()
	return errs
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fusedLengths: mixed sizes, zero-length buffers first, in the middle and last.
var fusedLengths = []int{0, 5, 1, 0, 13, 7, 0}

// rankValue is distinct for every rank, buffer and element, and small enough
// that sums, products of two and averages are exact in every dtype tested.
func rankValue(rank, buf, i int) float64 { return float64(rank*3 + buf*5 + i%4 + 1) }

func TestAllReduceFusedRankDistinct(t *testing.T) {
	for _, size := range []int{1, 2, 3, 5} {
		for _, op := range []comm.ReduceOp{comm.Sum, comm.Max, comm.Min, comm.Avg} {
			t.Run(fmt.Sprintf("size%d/%v", size, op), func(t *testing.T) {
				comms := newChanWorld(size)
				got := make([][][]float32, size)
				errs := onEveryRank(comms, func(c *chanComm) error {
					var bufs []comm.Buffer
					for b, n := range fusedLengths {
						s := make([]float32, n)
						for i := range s {
							s[i] = float32(rankValue(c.rank, b, i))
						}
						got[c.rank] = append(got[c.rank], s)
						bufs = append(bufs, comm.Host(s))
					}
					return comm.AllReduceFused(testCtx(t), c, bufs, op)
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				for b, n := range fusedLengths {
					for i := range n {
						var want float32
						switch op {
						case comm.Sum, comm.Avg:
							for r := range size {
								want += float32(rankValue(r, b, i))
							}
							if op == comm.Avg {
								want /= float32(size)
							}
						case comm.Max:
							want = float32(rankValue(size-1, b, i))
						case comm.Min:
							want = float32(rankValue(0, b, i))
						}
						for r := range size {
							if got[r][b][i] != want {
								t.Fatalf("rank %d bufs[%d][%d] = %v, want %v", r, b, i, got[r][b][i], want)
							}
						}
					}
				}
				if n := comms[0].world.sequences(); n != 1 {
					t.Fatalf("%d collectives started, want 1", n)
				}
			})
		}
	}
}

// TestAllReduceFusedDTypes: the packing is by bytes, for every element size.
func TestAllReduceFusedDTypes(t *testing.T) {
	comms := newChanWorld(3)
	type result struct {
		f16 [][]comm.Float16
		i8  [][]int8
		f64 [][]float64
	}
	got := make([]result, 3)
	errs := onEveryRank(comms, func(c *chanComm) error {
		res := &got[c.rank]
		var f16, i8, f64 []comm.Buffer
		for b, n := range fusedLengths {
			h, s, d := make([]comm.Float16, n), make([]int8, n), make([]float64, n)
			for i := range n {
				v := rankValue(c.rank, b, i)
				h[i], s[i], d[i] = comm.Float16FromFloat64(v), int8(v*10), v
			}
			res.f16, res.i8, res.f64 = append(res.f16, h), append(res.i8, s), append(res.f64, d)
			f16, i8, f64 = append(f16, comm.Host(h)), append(i8, comm.Host(s)), append(f64, comm.Host(d))
		}
		// Started together, waited later: three collectives in flight.
		w1 := comm.StartAllReduceFused(testCtx(t), c, f16, comm.Sum)
		w2 := comm.StartAllReduceFused(testCtx(t), c, i8, comm.Sum)
		w3 := comm.StartAllReduceFused(testCtx(t), c, f64, comm.Prod)
		return errors.Join(w1.Wait(), w2.Wait(), w3.Wait())
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for b, n := range fusedLengths {
		for i := range n {
			sum, prod := 0.0, 1.0
			for r := range 3 {
				sum += rankValue(r, b, i)
				prod *= rankValue(r, b, i)
			}
			for r := range 3 {
				if g := got[r].f16[b][i].Float32(); float64(g) != sum {
					t.Fatalf("rank %d f16 bufs[%d][%d] = %v, want %v", r, b, i, g, sum)
				}
				if g := got[r].i8[b][i]; g != int8(int(sum*10)) { // wraps, as Sum does
					t.Fatalf("rank %d i8 bufs[%d][%d] = %v, want %v", r, b, i, g, int8(int(sum*10)))
				}
				if g := got[r].f64[b][i]; g != prod {
					t.Fatalf("rank %d f64 bufs[%d][%d] = %v, want %v", r, b, i, g, prod)
				}
			}
		}
	}
}

// TestAllReduceFusedIsAsync: the Work is not done until every rank started.
func TestAllReduceFusedIsAsync(t *testing.T) {
	comms := newChanWorld(2)
	a, b := []float32{1, 2}, []float32{10, 20}
	w0 := comm.StartAllReduceFused(testCtx(t), comms[0], []comm.Buffer{comm.Host(a)}, comm.Sum)
	time.Sleep(10 * time.Millisecond)
	if done, _ := w0.Test(); done {
		t.Fatal("rank 0's fused AllReduce finished before rank 1 started")
	}
	if a[0] != 1 {
		t.Fatal("rank 0's buffer changed before the collective finished")
	}
	w1 := comm.StartAllReduceFused(testCtx(t), comms[1], []comm.Buffer{comm.Host(b)}, comm.Sum)
	if err := errors.Join(w0.Wait(), w1.Wait()); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(a, b) != "[11 22] [11 22]" {
		t.Fatalf("got %v and %v, want [11 22] on both", a, b)
	}
}

// TestAllReduceFusedEmpty: zero elements in total still starts a collective,
// so the ranks stay aligned, and the next collective works.
func TestAllReduceFusedEmpty(t *testing.T) {
	comms := newChanWorld(3)
	errs := onEveryRank(comms, func(c *chanComm) error {
		return comm.AllReduceFused(testCtx(t), c, []comm.Buffer{comm.Host([]float32{}), comm.Host([]float32(nil))}, comm.Sum)
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := comms[0].world.sequences(); n != 1 {
		t.Fatalf("%d collectives started, want 1", n)
	}
	checkStillAligned(t, comms)
}

// checkStillAligned runs one more AllReduce on every rank: if a failed fused
// call left the ranks at different sequence numbers, this mismatches.
func checkStillAligned(t *testing.T, comms []*chanComm) {
	t.Helper()
	sums := make([][]int32, len(comms))
	errs := onEveryRank(comms, func(c *chanComm) error {
		sums[c.rank] = []int32{int32(c.rank), 1}
		return c.AllReduce(testCtx(t), comm.Host(sums[c.rank]), comm.Host(sums[c.rank]), comm.Sum)
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("the ranks are no longer aligned: %v", err)
	}
	n := int32(len(comms))
	for r, s := range sums {
		if s[0] != n*(n-1)/2 || s[1] != n {
			t.Fatalf("rank %d: follow-up AllReduce gave %v", r, s)
		}
	}
}

// TestAllReduceFusedBadInput: a bad argument on one rank fails there with an
// *ArgError naming it, fails the others (instead of hanging them), leaves
// every buffer untouched, and keeps the ranks aligned.
func TestAllReduceFusedBadInput(t *testing.T) {
	good := func() []comm.Buffer {
		return []comm.Buffer{comm.Host([]float32{1, 2}), comm.Host([]float32{}), comm.Host([]float32{3}), comm.Host([]float32{4, 5, 6})}
	}
	cases := []struct {
		name    string
		bufs    func() []comm.Buffer
		arg     string
		problem string
	}{
		{"device buffer", func() []comm.Buffer {
			b := good()
			b[2] = comm.Device(0x1000, 1, comm.F32, 0)
			return b
		}, "bufs[2]", "device memory"},
		{"mixed dtypes", func() []comm.Buffer {
			b := good()
			b[3] = comm.Host([]float64{4, 5, 6})
			return b
		}, "bufs[3]", "dtype f64 differs from bufs[0]'s f32"},
		{"missing buffer", func() []comm.Buffer {
			b := good()
			b[1] = comm.Buffer{}
			return b
		}, "bufs[1]", "missing"},
		{"no buffers", func() []comm.Buffer { return nil }, "bufs", "is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const badRank = 1
			comms := newChanWorld(3)
			bufs := make([][]comm.Buffer, len(comms))
			for r := range comms {
				bufs[r] = good()
			}
			bufs[badRank] = c.bufs()
			before := snapshot(bufs)
			errs := onEveryRank(comms, func(cc *chanComm) error {
				return comm.AllReduceFused(testCtx(t), cc, bufs[cc.rank], comm.Sum)
			})
			for r, err := range errs {
				if r == badRank {
					var ae *comm.ArgError
					if !errors.As(err, &ae) || ae.Arg != c.arg || !strings.Contains(ae.Problem, c.problem) || ae.Kind != comm.KindAllReduce {
						t.Fatalf("rank %d: got %v, want an *ArgError for %s saying %q", r, err, c.arg, c.problem)
					}
					if !errors.Is(err, comm.ErrInvalidArgument) {
						t.Fatalf("rank %d: %v is not ErrInvalidArgument", r, err)
					}
					continue
				}
				if !errors.Is(err, comm.ErrPeerAbandoned) {
					t.Fatalf("rank %d: got %v, want the peer's abandonment", r, err)
				}
			}
			if after := snapshot(bufs); after != before {
				t.Fatalf("buffers changed on error:\nbefore %s\nafter  %s", before, after)
			}
			if n := comms[0].world.sequences(); n != 1 {
				t.Fatalf("%d collectives started, want 1", n)
			}
			checkStillAligned(t, comms)
		})
	}
}

// TestAllReduceFusedCollectiveFails: when the AllReduce itself fails (here
// ranks disagree on the total, or the op is refused), every rank gets the
// communicator's error and the buffers stay as they were.
func TestAllReduceFusedCollectiveFails(t *testing.T) {
	cases := []struct {
		name  string
		extra bool // rank 2 passes one element more
		op    comm.ReduceOp
		dtype comm.DType
		want  error
	}{
		{"different totals", true, comm.Sum, comm.F32, comm.ErrMismatch},
		{"avg on integers", false, comm.Avg, comm.I32, comm.ErrInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			comms := newChanWorld(3)
			bufs := make([][]comm.Buffer, 3)
			for r := range bufs {
				n := 4
				if c.extra && r == 2 {
					n = 5
				}
				if c.dtype == comm.I32 {
					bufs[r] = []comm.Buffer{comm.Host(make([]int32, n)), comm.Host([]int32{int32(r)})}
				} else {
					bufs[r] = []comm.Buffer{comm.Host(make([]float32, n)), comm.Host([]float32{float32(r)})}
				}
			}
			before := snapshot(bufs)
			errs := onEveryRank(comms, func(cc *chanComm) error {
				return comm.AllReduceFused(testCtx(t), cc, bufs[cc.rank], c.op)
			})
			for r, err := range errs {
				if err == nil || (!errors.Is(err, c.want) && !errors.Is(err, comm.ErrPeerAbandoned)) {
					t.Fatalf("rank %d: got %v, want %v", r, err, c.want)
				}
			}
			if after := snapshot(bufs); after != before {
				t.Fatalf("buffers changed on error:\nbefore %s\nafter  %s", before, after)
			}
			checkStillAligned(t, comms)
		})
	}
}

func TestAllReduceFusedCanceled(t *testing.T) {
	comms := newChanWorld(2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	x := []float32{1, 2, 3}
	err := comm.AllReduceFused(ctx, comms[0], []comm.Buffer{comm.Host(x)}, comm.Sum)
	if !errors.Is(err, comm.ErrCanceled) {
		t.Fatalf("got %v, want ErrCanceled", err)
	}
	if fmt.Sprint(x) != "[1 2 3]" {
		t.Fatalf("buffer changed to %v", x)
	}
}

// snapshot is the bytes of every buffer, to compare before and after.
func snapshot(bufs [][]comm.Buffer) string {
	var sb strings.Builder
	for _, rank := range bufs {
		for _, b := range rank {
			fmt.Fprintf(&sb, "%x|", b.Bytes())
		}
		sb.WriteString("\n")
	}
	return sb.String()
}
