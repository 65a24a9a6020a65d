package commtest

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/hiercomm/hiercomm/comm"
)

// arena allocates the buffers of one step through Memory and frees them all
// at the end.
type arena struct {
	mem    Memory
	allocs []comm.Buffer
}

// buffer returns a buffer of dt holding init (whose length fixes the count).
func (a *arena) buffer(dt comm.DType, init []byte) (comm.Buffer, error) {
	b, err := a.mem.Alloc(dt, len(init)/dt.Size())
	if err != nil {
		return comm.Buffer{}, fmt.Errorf("Memory.Alloc: %w", err)
	}
	a.allocs = append(a.allocs, b)
	if err := a.mem.Write(b, init); err != nil {
		return comm.Buffer{}, fmt.Errorf("Memory.Write: %w", err)
	}
	return b, nil
}

// zeros returns a buffer of n elements of dt, all bits zero.
func (a *arena) zeros(dt comm.DType, n int) (comm.Buffer, error) {
	return a.buffer(dt, make([]byte, n*dt.Size()))
}

// read returns the bytes of b, a buffer from this arena.
func (a *arena) read(b comm.Buffer) ([]byte, error) {
	got := make([]byte, b.ByteLen())
	if err := a.mem.Read(got, b); err != nil {
		return nil, fmt.Errorf("Memory.Read: %w", err)
	}
	return got, nil
}

func (a *arena) free() {
	for _, b := range a.allocs {
		a.mem.Free(b)
	}
	a.allocs = nil
}

// message is the content of a point-to-point message, a pure function of
// (name, sender, n), so the receiver knows what it must get.
func message(name string, dt comm.DType, sender, size, n int) []byte {
	h := fnv.New64a()
	h.Write([]byte(name))
	tc := testCase{kind: comm.KindSend, dt: dt, seed: h.Sum64()}
	s := newSource(&tc, size)
	b := make([]byte, n*dt.Size())
	s.fill(b, sender, 0, n)
	return b
}

// step is one named check of a suite; it returns what was wrong ("" when
// nothing) or the error of a call.
type step struct {
	name string
	run  func(ctx context.Context, a *arena) (string, error)
}

// runSteps runs steps in order, each under its own timeout and arena, and
// stops after a call error when the ranks may no longer agree.
func runSteps(ctx context.Context, c comm.Communicator, steps []step, o Options, suite string) error {
	r := newReport(suite, c.Rank(), o)
	for i, st := range steps {
		if err := ctx.Err(); err != nil {
			r.stopped = fmt.Sprintf("stopped before %s: %v", st.name, err)
			break
		}
		r.ran++
		if !runStep(ctx, st, o, r) {
			r.stopped = fmt.Sprintf("stopped after %s (%d steps not run)", st.name, len(steps)-i-1)
			break
		}
	}
	o.Log("commtest %s: rank %d: %d steps, %d failed%s", suite, c.Rank(), r.ran, r.failed, r.margin())
	return r.err()
}

func runStep(ctx context.Context, st step, o Options, r *report) bool {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	return guard(ctx, r, st.name, o, func(r *report) bool {
		a := &arena{mem: o.Memory}
		defer a.free()
		msg, err := st.run(ctx, a)
		if err != nil {
			return r.callFailed(st.name, err)
		}
		if msg != "" {
			r.fail(st.name, "%s", msg)
		}
		return true
	})
}
