package nccl_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nccl/ncclfake"
	"github.com/hiercomm/hiercomm/nexar"
)

// worldSizes are the conformance suite's world sizes: one rank, a pair,
// odd sizes, a power of two and sizes that are not.
var worldSizes = []int{1, 2, 3, 4, 5, 8}

// fakeWorld returns n nccl.Comms over the fake library, every rank on fake
// device 0 (the fake, unlike NCCL, lets ranks share a device), made over
// an in-memory nexar world as their control.
func fakeWorld(t testing.TB, n int) ([]comm.Communicator, *nccl.Device) {
	t.Helper()
	return fakeWorldWith(t, n, nccl.Config{})
}

// fakeWorldWith is fakeWorld with cfg (its Device is set here).
func fakeWorldWith(t testing.TB, n int, cfg nccl.Config) ([]comm.Communicator, *nccl.Device) {
	t.Helper()
	return fakeWorldOf(t, n, cfg, ncclfake.Options{})
}

// fakeWorldOf is fakeWorldWith over a fake made with opt.
func fakeWorldOf(t testing.TB, n int, cfg nccl.Config, opt ncclfake.Options) ([]comm.Communicator, *nccl.Device) {
	t.Helper()
	controls, err := nexar.NewMemoryWorld(n, nexar.Options{ProbeAfter: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return fakeWorldOverOf(t, asComms(controls), cfg, opt)
}

// fakeWorldOver is fakeWorldWith over the given controls, one per rank.
func fakeWorldOver(t testing.TB, controls []comm.Communicator, cfg nccl.Config) ([]comm.Communicator, *nccl.Device) {
	t.Helper()
	return fakeWorldOverOf(t, controls, cfg, ncclfake.Options{})
}

// fakeWorldOverOf is fakeWorldOver over a fake made with opt.
func fakeWorldOverOf(t testing.TB, controls []comm.Communicator, cfg nccl.Config, opt ncclfake.Options) ([]comm.Communicator, *nccl.Device) {
	t.Helper()
	return fakeWorldOn(t, ncclfake.New(opt), controls, cfg)
}

// fakeWorldOn is fakeWorldOver on lib, a fake.
func fakeWorldOn(t testing.TB, lib *nccl.Library, controls []comm.Communicator, cfg nccl.Config) ([]comm.Communicator, *nccl.Device) {
	t.Helper()
	n := len(controls)
	dev, err := lib.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms := make([]comm.Communicator, n)
	errs := make(chan error, n)
	for r := range n {
		go func() {
			cfg := cfg
			cfg.Device = dev
			c, err := nccl.New(ctx, controls[r], cfg)
			comms[r] = c
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms, dev
}

func options(dev *nccl.Device) commtest.Options {
	o := commtest.Options{Timeout: time.Minute, Memory: dev}
	if raceEnabled {
		o.Counts = []int{0, 1, 7, 4099}
	}
	return o
}

func TestConformanceFake(t *testing.T) {
	for _, n := range worldSizes {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			comms, dev := fakeWorld(t, n)
			commtest.Run(t, comms, options(dev))
		})
	}
}

// TestConformanceFakeBeforeFP8: NCCL 2.23 has no fp8 types, and NCCL
// 2.24 and later reduce them on sm90 GPUs only; the fp8 dtypes still pass,
// carried as bytes (2.23) and reduced on the host.
func TestConformanceFakeBeforeFP8(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  ncclfake.Options
		n    int
	}{
		{"nccl2.23/ranks=1", ncclfake.Options{Version: 22304}, 1},
		{"nccl2.23/ranks=3", ncclfake.Options{Version: 22304}, 3},
		{"nccl2.23/ranks=4", ncclfake.Options{Version: 22304}, 4},
		{"sm80/ranks=3", ncclfake.Options{ComputeCapability: 80}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms, dev := fakeWorldOf(t, tc.n, nccl.Config{}, tc.opt)
			o := options(dev)
			o.DTypes = []comm.DType{comm.F8E4M3, comm.F8E5M2}
			o.Counts = []int{0, 1, 7, 4099}
			commtest.Run(t, comms, o)
		})
	}
}

// TestSuitesFake runs the other suites; not RunFused: comm.AllReduceFused
// packs host buffers by contract, and a GPU communicator takes device
// buffers only.
func TestSuitesFake(t *testing.T) {
	for _, n := range []int{1, 3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			comms, dev := fakeWorld(t, n)
			o := options(dev)
			o.Counts = []int{0, 1, 7, 4099}
			t.Run("P2P", func(t *testing.T) { commtest.RunP2P(t, comms, o) })
			t.Run("NonBlocking", func(t *testing.T) { commtest.RunNonBlocking(t, comms, o) })
			t.Run("BadInput", func(t *testing.T) { commtest.RunBadInput(t, comms, o) })
			t.Run("Split", func(t *testing.T) { commtest.RunSplit(t, comms, o) })
			t.Run("Mismatch", func(t *testing.T) { commtest.RunMismatch(t, comms, o) })
			t.Run("Matrix", func(t *testing.T) { commtest.RunMismatchMatrix(t, comms, o) })
			t.Run("Faults", func(t *testing.T) {
				commtest.RunFaults(t, comms, commtest.Options{Timeout: 5 * time.Second, Memory: dev})
			})
		})
	}
}
