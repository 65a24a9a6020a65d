package dp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/hiercomm/hiercomm/comm"
)

// DefaultBucketBytes is the bucket cap when Options.BucketBytes is 0:
// torch DDP's default bucket_cap_mb, 25 MiB.
const DefaultBucketBytes = 25 << 20

// Options are a Reducer's settings; the zero Options averages in buckets
// of DefaultBucketBytes, packing each bucket of several gradients.
type Options struct {
	// BucketBytes caps a bucket: a bucket closes before the gradient that
	// would take it past the cap, so a gradient larger than the cap gets a
	// bucket of its own. 0 is DefaultBucketBytes. A large cap makes one
	// bucket of everything (nothing overlaps backward: its AllReduce starts
	// when the last gradient is ready), a small one a bucket per gradient.
	BucketBytes int

	// Op is the reduction; 0 is comm.Avg, the mean gradient over the ranks.
	// The contract defines Avg on the float dtypes only (f32, f64, f16,
	// bf16, f8e4m3, f8e5m2): a Reducer over integer gradients needs another
	// op (comm.Sum, dividing as you choose), and NewReducer refuses Avg on
	// them.
	Op comm.ReduceOp

	// Scalar is this rank's factor when Op is comm.PreMulSum: every
	// gradient is multiplied by it before the sum (as torch's DDP hooks
	// do with PREMUL_SUM, e.g. 1/(ranks × accumulation steps)); ranks may
	// pass different factors. It must be 0 for every other op, and not 0
	// with PreMulSum.
	Scalar float64

	// Flat, if not the zero Buffer, is memory that the gradients are views
	// of, as a model whose gradients are one flat vector cut into layers:
	// a bucket of gradients that follow one another there is reduced in
	// place, as one view of Flat, with no packing copy. It may be device
	// memory (the bucket's AllReduce then runs on the device); gradients
	// outside it, or not adjacent, are packed as without it.
	Flat comm.Buffer
}

// Bucket describes one bucket of a Reducer: gradients First..Last of the
// list (consecutive; First ≤ Last), all of DType, Len elements in all.
// Packed says whether its AllReduce runs on a packed copy of them, laid out
// once (host memory: the gradients in list order, each one's elements in
// order), which each step fills before the AllReduce and unpacks after it.
// Grouped says whether it runs as a comm.Batch of one AllReduce in place
// per gradient (device gradients that are not one view of Options.Flat:
// device memory is not packed), started as one unit: on an nccl
// communicator, one NCCL group. Otherwise it runs in place: on its one
// gradient, or on the view of Options.Flat that its gradients fill.
type Bucket struct {
	First, Last int
	DType       comm.DType
	Len         int
	Packed      bool
	Grouped     bool
}

// Bytes is the bucket's size in bytes.
func (b Bucket) Bytes() int { return b.Len * b.DType.Size() }

func (b Bucket) String() string {
	how := "in place"
	switch {
	case b.Packed:
		how = "packed"
	case b.Grouped:
		how = "grouped"
	}
	grads := fmt.Sprintf("grads %d-%d", b.First, b.Last)
	if b.First == b.Last {
		grads = fmt.Sprintf("grad %d", b.First)
	}
	return fmt.Sprintf("%s (%d×%v, %s)", grads, b.Len, b.DType, how)
}

// Reducer reduces a fixed list of gradients every step through persistent
// buckets, DistributedDataParallel's way: NewReducer groups them, in the
// reverse of the list's order (backward produces the last layer's gradient
// first), into buckets of one dtype and about Options.BucketBytes, and lays
// out each bucket's memory once. A step is
//
//	r.Ready(ctx, i) // for each gradient, as backward finishes it (or r.Start(ctx) once after backward)
//	err := r.Wait() // every bucket reduced: the gradients hold the result
//
// A bucket's AllReduce starts as soon as every gradient in it is Ready and
// every bucket before it has started (every rank starts the same
// collectives in the same order, whatever order its gradients are ready
// in), so it runs while backward computes the gradients of the layers
// below; Wait waits for them all, and copies the packed buckets back into
// their gradients. A step allocates nothing in the Reducer: the buckets'
// memory is laid out by NewReducer and reused (the communicator's own
// Start may allocate, and so does a grouped bucket's comm.Batch.Start).
//
// Every rank must build its Reducer from gradients of the same dtypes and
// lengths, in the same order, with the same Options.BucketBytes and Op, so
// that the ranks' buckets match: a bucket whose length or dtype differs
// across ranks is the communicator's *comm.MismatchError, from Wait, on
// every rank (a rank with a bucket more than the others gets it when they
// start their next collective). The gradients belong to the Reducer from a step's first
// Ready or Start until its Wait returns: do not write a gradient after it
// is Ready. After an error the gradients hold no defined result: a packed
// bucket's keep this rank's own values, an in-place bucket's may be
// partly reduced.
//
// Ready, Start and Wait may be called from several goroutines (Wait last).
// A Reducer runs on the communicator it was made with: after a Shrink,
// make another on the survivors' communicator (a step that failed is
// redone there from Ready).
type Reducer struct {
	c       comm.Communicator
	grads   []comm.Buffer
	op      comm.ReduceOp
	scalar  float64 // PreMulSum's factor
	buckets []bucket
	of      []int // of[i] is the bucket of grads[i]

	mu    sync.Mutex
	ctx   context.Context // the step's: its first Ready or Start's; nil between steps
	ready []bool          // ready[i]: grads[i] was marked Ready this step
	next  int             // the next bucket to start
}

// bucket is a Bucket and its step's state.
type bucket struct {
	Bucket
	buf     comm.Buffer // what the AllReduce runs on, in place
	packed  []byte      // buf's memory when Packed
	batch   *comm.Batch // the AllReduces when Grouped, built once
	pending int         // gradients not yet Ready this step
	work    *comm.Work  // this step's AllReduce once started
}

// NewReducer lays out the buckets of grads (see Reducer) for reductions on
// c. grads may be empty (a Reducer with no buckets starts no collective);
// a gradient may have 0 elements. It returns an error naming the gradient
// when one is missing (the zero Buffer) or when op is not defined on its
// dtype (comm.CanReduce), and one naming the bucket when it mixes host
// and device gradients.
func NewReducer(c comm.Communicator, grads []comm.Buffer, opt Options) (*Reducer, error) {
	op, capBytes := opt.Op, opt.BucketBytes
	if op == 0 {
		op = comm.Avg
	}
	if capBytes == 0 {
		capBytes = DefaultBucketBytes
	}
	if capBytes < 0 {
		return nil, fmt.Errorf("dp.NewReducer: Options.BucketBytes %d: want 0 (the default, %d) or more", opt.BucketBytes, DefaultBucketBytes)
	}
	if (op == comm.PreMulSum) != (opt.Scalar != 0) {
		return nil, fmt.Errorf("dp.NewReducer: Options.Scalar %v with op %v: PreMulSum needs a factor other than 0, and no other op takes one", opt.Scalar, op)
	}
	for i, g := range grads {
		if g.IsZero() || !g.DType().Valid() {
			return nil, fmt.Errorf("dp.NewReducer: grads[%d] is missing (the zero Buffer)", i)
		}
		if err := comm.CanReduce(g.DType(), op); err != nil {
			hint := ""
			if op == comm.Avg {
				hint = "; pass Options{Op: comm.Sum} and divide"
			}
			return nil, fmt.Errorf("dp.NewReducer: grads[%d] (%v): %v%s", i, g, err, hint)
		}
	}
	r := &Reducer{c: c, grads: grads, op: op, scalar: opt.Scalar, of: make([]int, len(grads)), ready: make([]bool, len(grads))}
	// Backward order: the last gradient first. A bucket holds consecutive
	// gradients of one dtype, First..Last.
	for i := len(grads) - 1; i >= 0; i-- {
		g := grads[i]
		if k := len(r.buckets) - 1; k >= 0 {
			b := &r.buckets[k]
			if b.DType == g.DType() && (b.Len+g.Len())*g.DType().Size() <= capBytes {
				b.First, b.Len = i, b.Len+g.Len()
				continue
			}
		}
		r.buckets = append(r.buckets, bucket{Bucket: Bucket{First: i, Last: i, DType: g.DType(), Len: g.Len()}})
	}
	for k := range r.buckets {
		b := &r.buckets[k]
		for i := b.First; i <= b.Last; i++ {
			r.of[i] = k
		}
		b.pending = b.Last - b.First + 1
		if err := r.layout(b, opt.Flat); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// layout sets what bucket b's AllReduce runs on: in place where its
// gradients allow, else a packed copy (host memory) or a batch of
// AllReduces in place (device memory).
func (r *Reducer) layout(b *bucket, flat comm.Buffer) error {
	one, nonEmpty := r.grads[b.First], 0
	host := true
	for i := b.First; i <= b.Last; i++ {
		if g := r.grads[i]; g.Len() > 0 {
			one, nonEmpty = g, nonEmpty+1
			host = host && g.OnHost()
		}
	}
	if nonEmpty <= 1 {
		b.buf = one // its one gradient (or an empty one)
		return nil
	}
	if v, ok := r.view(b, flat); ok {
		b.buf = v
		return nil
	}
	if !host {
		b.Grouped, b.batch = true, new(comm.Batch)
		for i := b.First; i <= b.Last; i++ {
			g := r.grads[i]
			if g.Len() == 0 {
				continue
			}
			if g.OnHost() {
				return fmt.Errorf("dp.NewReducer: the bucket of grads[%d..%d] mixes device memory and host memory (grads[%d], %v); keep a model's gradients on one side, or pass a smaller Options.BucketBytes", b.First, b.Last, i, g)
			}
			if err := b.batch.Add(comm.Call{Kind: comm.KindAllReduce, Send: g, Recv: g, Op: r.op, Scalar: r.scalar}); err != nil {
				panic("dp: grouped bucket: " + err.Error()) // a new batch, not started
			}
		}
		return nil
	}
	b.Packed = true
	b.packed = alignedBytes(b.Bytes())
	buf, err := comm.HostBytes(b.DType, b.packed)
	if err != nil {
		panic("dp: packed bucket: " + err.Error()) // whole elements by construction
	}
	b.buf = buf
	return nil
}

// view returns the view of flat that the gradients of b fill, one after
// another in list order, if they do.
func (r *Reducer) view(b *bucket, flat comm.Buffer) (comm.Buffer, bool) {
	if flat.IsZero() || flat.ByteLen() == 0 {
		return comm.Buffer{}, false
	}
	start, end := -1, -1 // byte offsets in flat
	for i := b.First; i <= b.Last; i++ {
		g := r.grads[i]
		if g.Len() == 0 {
			continue
		}
		off, ok := offsetIn(flat, g)
		switch {
		case !ok, end >= 0 && off != end:
			return comm.Buffer{}, false
		case start < 0:
			start = off
		}
		end = off + g.ByteLen()
	}
	if start%b.DType.Size() != 0 {
		return comm.Buffer{}, false
	}
	if flat.OnHost() {
		v, err := comm.HostBytes(b.DType, flat.Bytes()[start:end])
		return v, err == nil
	}
	return comm.Device(flat.Ptr()+uintptr(start), b.Len, b.DType, flat.Device()), true
}

// offsetIn returns the byte offset of g in flat, if g lies within it.
func offsetIn(flat, g comm.Buffer) (int, bool) {
	var base, at uintptr
	switch {
	case flat.OnHost() && g.OnHost():
		base, at = uintptr(unsafe.Pointer(unsafe.SliceData(flat.Bytes()))), uintptr(unsafe.Pointer(unsafe.SliceData(g.Bytes())))
	case !flat.OnHost() && !g.OnHost() && flat.Device() == g.Device():
		base, at = flat.Ptr(), g.Ptr()
	default:
		return 0, false
	}
	if at < base || at+uintptr(g.ByteLen()) > base+uintptr(flat.ByteLen()) {
		return 0, false
	}
	return int(at - base), true
}

// alignedBytes returns n zero bytes aligned for every dtype (8 bytes), as
// the reduction kernels prefer.
func alignedBytes(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	words := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
}

// Buckets describes the buckets, in the order their AllReduces start.
func (r *Reducer) Buckets() []Bucket {
	out := make([]Bucket, len(r.buckets))
	for k, b := range r.buckets {
		out[k] = b.Bucket
	}
	return out
}

// Ready says that gradient i is written for this step (backward is done
// with it): once every gradient of its bucket is Ready, and every bucket
// before it has started, its AllReduce starts, bounded by ctx (the first
// Ready or Start of a step sets the step's ctx). Marking a gradient twice
// in a step changes nothing. It panics if i is out of range.
func (r *Reducer) Ready(ctx context.Context, i int) {
	if i < 0 || i >= len(r.grads) {
		panic(fmt.Sprintf("dp.Reducer.Ready(%d): out of range for %d gradients", i, len(r.grads)))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil {
		r.ctx = ctx
	}
	if !r.ready[i] {
		r.ready[i] = true
		r.buckets[r.of[i]].pending--
	}
	r.startReady()
}

// Start says that every gradient is written: it starts every bucket not
// started yet this step (all of them, where no Ready came before), bounded
// by ctx unless a Ready set the step's ctx already. Wait ends the step.
func (r *Reducer) Start(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil {
		r.ctx = ctx
	}
	r.markAll()
	r.startReady()
}

// markAll marks every gradient Ready.
func (r *Reducer) markAll() {
	for i, ok := range r.ready {
		if !ok {
			r.ready[i] = true
			r.buckets[r.of[i]].pending--
		}
	}
}

// startReady starts the buckets, in order, whose gradients are all Ready.
func (r *Reducer) startReady() {
	for r.next < len(r.buckets) && r.buckets[r.next].pending == 0 {
		b := &r.buckets[r.next]
		if b.Packed {
			off := 0
			for i := b.First; i <= b.Last; i++ {
				off += copy(b.packed[off:], r.grads[i].Bytes())
			}
		}
		if b.batch != nil {
			b.work = b.batch.Start(r.ctx, r.c)
		} else {
			b.work = r.c.Start(r.ctx, comm.Call{Kind: comm.KindAllReduce, Send: b.buf, Recv: b.buf, Op: r.op, Scalar: r.scalar})
		}
		r.next++
	}
}

// Wait ends the step: it waits for every bucket's AllReduce and copies the
// packed buckets' results into their gradients, then readies the Reducer
// for the next step. It returns the first error, naming the bucket. After
// a step with neither Ready nor Start it returns nil at once.
//
// A bucket with a gradient that was never marked Ready is started here all
// the same, so that every rank starts the same collectives, and Wait
// returns an error naming those gradients (a backward pass that skipped
// them, or a hook that was not called).
func (r *Reducer) Wait() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil {
		return nil
	}
	var missed error
	if r.next < len(r.buckets) {
		var never []int
		for i, ok := range r.ready {
			if !ok {
				never = append(never, i)
			}
		}
		missed = fmt.Errorf("dp.Reducer: grads %v were not marked Ready this step; their buckets were reduced all the same, so that the ranks stay in step", never)
		r.markAll()
		r.startReady()
	}
	var failed error
	for k := range r.buckets {
		b := &r.buckets[k]
		err := b.work.Wait()
		switch {
		case err != nil && failed == nil:
			failed = fmt.Errorf("dp.Reducer: AllReduce of bucket %d, %v: %w", k, b.Bucket, err)
		case err == nil && b.Packed:
			off := 0
			for i := b.First; i <= b.Last; i++ {
				off += copy(r.grads[i].Bytes(), b.packed[off:])
			}
		}
		b.work = nil
		b.pending = b.Last - b.First + 1
	}
	clear(r.ready)
	r.next, r.ctx = 0, nil
	if missed != nil {
		return errors.Join(missed, failed)
	}
	return failed
}

// AllReduce is Start(ctx) then Wait: a step's reduction with no overlap.
func (r *Reducer) AllReduce(ctx context.Context) error {
	r.Start(ctx)
	return r.Wait()
}
