package commtest

import (
	"flag"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// small are options that keep the reference fast: every kind, dtype and op,
// and one count at LargeCount to exercise the large subset.
var small = Options{Counts: []int{0, 1, 7, 33}, LargeCount: 33, Timeout: 20 * time.Second}

var sizes = []int{1, 2, 3, 4, 5, 8}

// TestReferencePasses: every suite passes on the reference communicator, at
// every world size.
func TestReferencePasses(t *testing.T) {
	for _, size := range sizes {
		t.Run(fmt.Sprintf("size=%d", size), func(t *testing.T) {
			t.Run("Run", func(t *testing.T) { Run(t, newRefWorld(size, noBug), small) })
			t.Run("P2P", func(t *testing.T) { RunP2P(t, newRefWorld(size, noBug), small) })
			t.Run("NonBlocking", func(t *testing.T) { RunNonBlocking(t, newRefWorld(size, noBug), small) })
			t.Run("Split", func(t *testing.T) { RunSplit(t, newRefWorld(size, noBug), small) })
			t.Run("BadInput", func(t *testing.T) { RunBadInput(t, newRefWorld(size, noBug), small) })
			t.Run("Mismatch", func(t *testing.T) { RunMismatch(t, newRefWorld(size, noBug), small) })
			t.Run("Fused", func(t *testing.T) { RunFused(t, newRefWorld(size, noBug), small) })
			t.Run("Batch", func(t *testing.T) { RunBatch(t, newRefWorld(size, noBug), small) })
		})
	}
}

var defaults = flag.Bool("commtest.defaults", false, "also measure the suite's own cost with the default Options at 8 ranks (TestSuiteCost)")

// TestSuiteCost measures the suite's own work for the default options at 8
// ranks, without a communicator: building every rank's inputs and expected
// results, and checking a correct result, for every case. This is the
// floor under any implementation's run of the suite, as CPU time (the
// process's, so other load on the machine does not count).
func TestSuiteCost(t *testing.T) {
	if !*defaults {
		t.Skip("run with -commtest.defaults")
	}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	const size = 8
	o := Options{}.withDefaults()
	cases := buildCases(o, size)
	var total, large time.Duration
	byKind := map[string]time.Duration{}
	for i := range cases {
		tc := &cases[i]
		c0 := cpu()
		for r := range size {
			p, err := prepare(tc, r, size, o.Memory)
			if err != nil {
				t.Fatal(err)
			}
			for _, ck := range p.checks { // a correct result, then the check
				b := make([]byte, ck.buf.ByteLen())
				copy(b[ck.off*p.src.e.size:], ck.want.join())
				o.Memory.Write(ck.buf, b)
			}
			p.verify()
			p.free()
		}
		d := cpu() - c0
		total += d
		byKind[tc.kind.String()] += d
		if tc.n >= o.LargeCount {
			large += d
		}
	}
	t.Logf("%d cases at %d ranks: the suite's own work is %v of CPU (%v of it in the %d-element cases); by kind: %v",
		len(cases), size, total.Round(time.Millisecond), large.Round(time.Millisecond), o.Counts[len(o.Counts)-1], byKind)
}
