//go:build linux

package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
)

// copyOut must be copy, whatever the lengths and the alignment of either
// side, and write nothing outside dst.
func TestCopyOutIsCopy(t *testing.T) {
	const guard = 64
	src := make([]byte, 1<<20+300)
	for i := range src {
		src[i] = byte(i*7 + i>>8)
	}
	for _, n := range []int{0, 1, 15, 16, 63, 64, 65, 127, 128, 129, 200, 4095, 4096, 1<<20 + 13} {
		for _, do := range []int{0, 1, 8, 15, 16, 31} {
			for _, so := range []int{0, 3, 16} {
				buf := bytes.Repeat([]byte{0xa5}, do+n+guard)
				dst := buf[do : do+n]
				copyOut(dst, src[so:so+n])
				if !bytes.Equal(dst, src[so:so+n]) {
					t.Fatalf("n=%d dst offset %d src offset %d: copyOut differs from copy", n, do, so)
				}
				for i, b := range append(buf[:do:do], buf[do+n:]...) {
					if b != 0xa5 {
						t.Fatalf("n=%d dst offset %d src offset %d: byte %d outside dst written", n, do, so, i)
					}
				}
			}
		}
	}
	// A shorter src copies len(src) bytes, as copy does.
	dst := make([]byte, 300)
	copyOut(dst, src[:100])
	if !bytes.Equal(dst[:100], src[:100]) || dst[100] != 0 {
		t.Fatal("copyOut with a short src differs from copy")
	}
}

// Every rank cuts messages into the steps of the creator's StepBytes (the
// segment's header says it), and the schedules are right with steps far
// smaller than a part and every result written with non-temporal stores:
// the conformance suite on that configuration, with counts that cross
// many steps.
func TestSmallStepsAndNonTemporalResults(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			ns := testNamespace()
			cs := make([]*Comm, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := range n {
				wg.Go(func() {
					cfg := Config{Namespace: ns, Rank: r, Size: n, SlotBytes: 64 << 10, NonTemporalBytes: 1}
					cfg.StepBytes = 3000 // not a multiple of any element or line size
					if r > 0 {
						cfg.StepBytes = 1 << 20 // not the creator: its value is not used
					}
					cs[r], errs[r] = New(context.Background(), cfg)
				})
			}
			wg.Wait()
			t.Cleanup(func() {
				if err := CloseAll(cs); err != nil {
					t.Errorf("CloseAll: %v", err)
				}
				noSegments(t, ns)
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			for _, c := range cs {
				if c.seg.l.stepBytes != 3000 {
					t.Fatalf("rank %d cuts steps of %d bytes, want the creator's 3000", c.rank, c.seg.l.stepBytes)
				}
			}
			opt := conformanceOptions()
			opt.Counts = []int{0, 1, 7, 4099, 100003}
			opt.DTypes = []comm.DType{comm.F32, comm.F64, comm.U8, comm.BF16}
			commtest.Run(t, asComms(cs), opt)
		})
	}
}
