package hierarchy_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/commtest"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nccl/ncclfake"
	"github.com/hiercomm/hiercomm/nexar"
)

// The hierarchy on device memory, as on a GPU cluster: NCCL inside each
// node (nccl.Comm over the fake library), the world and the rails staged
// through host memory (nccl.Staged over in-memory nexar), scratch memory
// and local steps on the device (nccl.Stager). Every rank shares the
// fake's device 0, which the fake allows.

// deviceLayouts are the layouts the device tests run on: homogeneous,
// heterogeneous, cyclic (not node-major), one rank per node (the flat
// staged world) and one node.
var deviceLayouts = []layout{
	{name: "2x2", perNode: []int{2, 2}},
	{name: "3x2", perNode: []int{2, 2, 2}},
	{name: "2+3", perNode: []int{2, 3}},
	{name: "2x2-cyclic", perNode: []int{2, 2}, cyclic: true},
	{name: "4x1", perNode: []int{1, 1, 1, 1}},
	{name: "1x4", perNode: []int{4}},
}

// stagerMode says how buildDevice gives each rank its nccl.Stager.
type stagerMode int

const (
	ownStager   stagerMode = iota // Config.NewStager only: the hierarchy makes and owns it
	givenStager                   // Config.Stager (closed by the test) and Config.NewStager for Split
	fixedStager                   // Config.Stager only: Split cannot make a child's
)

// buildDevice returns the device hierarchies of an in-process job and the
// device their buffers live on. cfg's Topology, Rank, parts and Stagers
// are filled in.
func buildDevice(t testing.TB, l layout, cfg hierarchy.Config, mode stagerMode) ([]comm.Communicator, *nccl.Device) {
	t.Helper()
	dev, err := ncclfake.New(ncclfake.Options{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	tp := topo(t, l)
	P := tp.Size()
	ws, err := nexar.NewMemoryWorld(P, nexar.Options{SegmentBytes: 4096, ProbeAfter: 100 * time.Millisecond, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	newStager := func() hierarchy.Stager { return nccl.NewStager(dev) }
	stagers := make([]*nccl.Stager, P) // the test's to close
	t.Cleanup(func() {                 // after the hierarchies (Cleanup is LIFO)
		for _, s := range stagers {
			if s != nil {
				s.Close()
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := make([]comm.Communicator, P)
	errs := make([]error, P)
	var wg sync.WaitGroup
	for r := range P {
		wg.Go(func() {
			col := tp.Colors(r)
			var made []comm.Communicator
			fail := func(what string, err error) {
				for _, c := range made {
					c.Close()
				}
				errs[r] = fmt.Errorf("%s: %w", what, err)
			}
			hostIntra, err := ws[r].Split(ctx, col.Intra, col.IntraKey)
			if err != nil {
				fail("splitting the intra-node part", err)
				return
			}
			made = append(made, hostIntra)
			hostRail, err := ws[r].Split(ctx, col.Rail, col.RailKey)
			if err != nil {
				fail("splitting the rail", err)
				return
			}
			made = append(made, hostRail)
			// The ranks of a node make their NCCL communicator together.
			intra, err := nccl.New(ctx, hostIntra, nccl.Config{Device: dev})
			if err != nil {
				fail("nccl.New", err)
				return
			}
			made[0] = intra // it owns hostIntra
			c := cfg
			c.Topology, c.Rank = tp, r
			if mode != ownStager {
				stagers[r] = nccl.NewStager(dev)
				c.Stager = stagers[r]
			}
			if mode != fixedStager {
				c.NewStager = newStager
			}
			c.World, c.Intra, c.Rail = nccl.NewStaged(ws[r], dev), intra, nccl.NewStaged(hostRail, dev)
			h, err := hierarchy.New(c)
			if err != nil {
				c.World.Close()
				c.Rail.Close()
				intra.Close()
				errs[r] = err
				return
			}
			out[r] = h
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeAll(out)
		nexar.CloseAll(ws)
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAll(out) })
	return out, dev
}

// deviceOptions keeps the device runs short: the fake moves every byte
// through one device thread, and the hierarchy's phases multiply the
// copies.
func deviceOptions(dev *nccl.Device) commtest.Options {
	o := commtest.Options{Timeout: 2 * time.Minute, Memory: dev, Counts: []int{0, 1, 7, 4099}}
	if raceEnabled {
		o.Counts = []int{0, 1, 7, 1031}
		o.LargeCount = 1024
	}
	return o
}

// TestDeviceConformance runs the whole suite on device buffers, with the
// large paths forced at small counts (many chunks), on every layout, and
// with the defaults (latency paths, one chunk) on two.
func TestDeviceConformance(t *testing.T) {
	for _, l := range deviceLayouts {
		t.Run(l.name+"/chunked", func(t *testing.T) {
			t.Parallel()
			comms, dev := buildDevice(t, l, small, ownStager)
			commtest.Run(t, comms, deviceOptions(dev))
		})
	}
	for _, l := range deviceLayouts[:3] {
		t.Run(l.name+"/defaults", func(t *testing.T) {
			if raceEnabled {
				t.Skip("the chunked run covers the race detector's pass")
			}
			t.Parallel()
			comms, dev := buildDevice(t, l, hierarchy.Config{}, givenStager)
			commtest.Run(t, comms, deviceOptions(dev))
		})
	}
}

// TestDeviceSuites runs the other suites on device buffers. On 2×4 the
// Split suite's parity children are hierarchies themselves (2×2), whose
// collectives run beside their parent's, each in scratch memory of its
// own.
func TestDeviceSuites(t *testing.T) {
	for _, l := range append(deviceLayouts[:2:2], layout{name: "2x4", perNode: []int{4, 4}}) {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			opt := commtest.Options{Timeout: time.Minute}
			mk := func() []comm.Communicator {
				comms, dev := buildDevice(t, l, small, ownStager)
				opt.Memory = dev
				return comms
			}
			t.Run("p2p", func(t *testing.T) { commtest.RunP2P(t, mk(), opt) })
			t.Run("nonblocking", func(t *testing.T) { commtest.RunNonBlocking(t, mk(), opt) })
			t.Run("split", func(t *testing.T) { commtest.RunSplit(t, mk(), opt) })
			t.Run("badinput", func(t *testing.T) { commtest.RunBadInput(t, mk(), opt) })
			t.Run("mismatch", func(t *testing.T) { commtest.RunMismatch(t, mk(), opt) })
			t.Run("faults", func(t *testing.T) {
				comms := mk() // sets opt.Memory
				o := opt
				o.Timeout = 10 * time.Second
				commtest.RunFaults(t, comms, o)
			})
			t.Run("matrix", func(t *testing.T) {
				comms := mk() // sets opt.Memory
				// 1 KiB chunks (small) make the large paths permute their
				// blocks 32 elements at a time: at 70001 elements a
				// ReduceScatter on 2x4 is 2188 chunks, 17,504 device copies
				// through the fake's one device thread before any part
				// runs (1.8-5 s here, before the census can ask). The
				// pipelined paths are covered at small counts; 70001 runs
				// below with the defaults, as users run it.
				o := opt
				o.Counts = []int{1, 1000, 4099}
				if raceEnabled {
					o.MismatchWithin = 5 * time.Second // the race detector slows every step
				}
				commtest.RunMismatchMatrix(t, comms, o)
			})
			t.Run("matrix/defaults", func(t *testing.T) {
				comms, dev := buildDevice(t, l, hierarchy.Config{}, ownStager)
				o := opt
				o.Memory = dev
				o.Counts = []int{70001}
				if raceEnabled {
					o.MismatchWithin = 5 * time.Second
				}
				commtest.RunMismatchMatrix(t, comms, o)
			})
		})
	}
}

// TestDeviceRejectsHostBuffers: a rank that gives a device hierarchy host
// memory gets an *comm.ArgError naming the buffer, its peers
// comm.ErrPeerAbandoned, and the hierarchy goes on working: for a
// collective on each kind of path, and for Send, which the sender alone
// sees.
func TestDeviceRejectsHostBuffers(t *testing.T) {
	for _, l := range []layout{deviceLayouts[0], deviceLayouts[2]} {
		t.Run(l.name, func(t *testing.T) {
			comms, dev := buildDevice(t, l, small, ownStager)
			P := len(comms)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const n = 600 // above SmallBytes: the large paths
			cases := []struct {
				name string
				call func(send, recv comm.Buffer, rank int) comm.Call
				// recvLen is recv's length; the check after each case sums
				// send (n elements of rank+1) into the first n of recv.
				recvLen int
			}{
				{"AllReduce", func(s, r comm.Buffer, _ int) comm.Call {
					return comm.Call{Kind: comm.KindAllReduce, Send: s, Recv: r, Op: comm.Sum}
				}, n},
				{"ReduceScatter", func(s, r comm.Buffer, _ int) comm.Call {
					return comm.Call{Kind: comm.KindReduceScatter, Send: s.Slice(0, P*(n/P)), Recv: r.Slice(0, n/P), Op: comm.Sum}
				}, n},
				{"AllToAllV", func(s, r comm.Buffer, _ int) comm.Call {
					counts := make([]int, P)
					for i := range counts {
						counts[i] = n / P
					}
					return comm.Call{Kind: comm.KindAllToAllV, Send: s, SendCounts: counts, Recv: r, RecvCounts: counts}
				}, n},
				{"Gather", func(s, r comm.Buffer, rank int) comm.Call {
					c := comm.Call{Kind: comm.KindGather, Send: s, Root: 1}
					if rank == 1 {
						c.Recv = r
					}
					return c
				}, P * n},
			}
			for i, tc := range cases {
				bad := i % P
				errs := make([]error, P)
				var wg sync.WaitGroup
				for r, c := range comms {
					wg.Go(func() {
						errs[r] = hostBufferCase(ctx, c, dev, tc.call, tc.recvLen, r, bad)
					})
				}
				wg.Wait()
				for r, err := range errs {
					if err != nil {
						t.Errorf("%s, host buffers on rank %d: rank %d: %v", tc.name, bad, r, err)
					}
				}
			}
			// Send: the sender's own error, at once, whichever part would
			// carry it (rank 0's peers 1 and P-1 are on either node).
			host := comm.Host(make([]float32, 4))
			for _, peer := range []int{1, P - 1} {
				err := comms[0].Send(ctx, host, peer, 7)
				var ae *comm.ArgError
				if !errors.As(err, &ae) || ae.Arg != "send" {
					t.Errorf("Send of host memory to rank %d: %v; want an *comm.ArgError naming send", peer, err)
				}
			}
		})
	}
}

// hostBufferCase runs one collective in which rank bad passes host memory
// (the others device memory), checks each rank's error, then checks that
// an AllReduce on device memory still works.
func hostBufferCase(ctx context.Context, c comm.Communicator, dev *nccl.Device, call func(send, recv comm.Buffer, rank int) comm.Call, recvLen, rank, bad int) error {
	const n = 600
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(rank + 1)
	}
	host := comm.Host(vals)
	send, err := dev.Alloc(comm.F32, n)
	if err != nil {
		return err
	}
	defer dev.Free(send)
	recv, err := dev.Alloc(comm.F32, recvLen)
	if err != nil {
		return err
	}
	defer dev.Free(recv)
	if err := dev.Write(send, host.Bytes()); err != nil {
		return err
	}
	s, r := send, recv
	if rank == bad {
		s, r = host, comm.Host(make([]float32, recvLen))
	}
	k := call(s, r, rank)
	err = c.Start(ctx, k).Wait()
	var ae *comm.ArgError
	switch {
	case rank == bad && !errors.As(err, &ae):
		return fmt.Errorf("%v of host memory returned %v; want an *comm.ArgError", k.Kind, err)
	case rank == bad && ae.Arg != "send" && ae.Arg != "recv":
		return fmt.Errorf("%v of host memory: the *comm.ArgError names %q; want send or recv (%v)", k.Kind, ae.Arg, err)
	case rank != bad && err != nil && !errors.Is(err, comm.ErrPeerAbandoned):
		return fmt.Errorf("%v: %v; want nil or comm.ErrPeerAbandoned", k.Kind, err)
	case rank != bad && errors.Is(err, comm.ErrTimeout):
		return fmt.Errorf("%v: waited for the bad rank: %v", k.Kind, err)
	}
	// Still usable: a device AllReduce, checked.
	out := recv.Slice(0, n)
	if err := c.AllReduce(ctx, send, out, comm.Sum); err != nil {
		return fmt.Errorf("AllReduce after the rejected %v: %w", k.Kind, err)
	}
	got := make([]float32, n)
	if err := dev.Read(comm.Host(got).Bytes(), out); err != nil {
		return err
	}
	P := c.Size()
	if want := float32(P * (P + 1) / 2); got[0] != want || got[n-1] != want {
		return fmt.Errorf("AllReduce after the rejected %v: got %v … %v, want %v", k.Kind, got[0], got[n-1], want)
	}
	return nil
}

// TestDeviceSplitNeedsNewStager: a hierarchy given one Stager and no
// NewStager cannot give a child scratch memory of its own (its executor
// runs beside the parent's); Split says so on every rank with an
// *comm.ArgError, and the parent goes on working.
func TestDeviceSplitNeedsNewStager(t *testing.T) {
	comms, dev := buildDevice(t, deviceLayouts[0], small, fixedStager)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			child, err := c.Split(ctx, r%2, r)
			var ae *comm.ArgError
			if !errors.As(err, &ae) || ae.Arg != "Config.NewStager" {
				errs[r] = fmt.Errorf("Split: %v, %v; want an *comm.ArgError naming Config.NewStager", child, err)
				if child != nil {
					child.Close()
				}
				return
			}
			b, err := dev.Alloc(comm.I64, 3)
			if err != nil {
				errs[r] = err
				return
			}
			defer dev.Free(b)
			if err := dev.Write(b, comm.Host([]int64{int64(r), 1, -int64(r)}).Bytes()); err != nil {
				errs[r] = err
				return
			}
			if err := c.AllReduce(ctx, b, b, comm.Sum); err != nil {
				errs[r] = fmt.Errorf("AllReduce after the failed Split: %w", err)
				return
			}
			got := make([]int64, 3)
			if err := dev.Read(comm.Host(got).Bytes(), b); err != nil {
				errs[r] = err
				return
			}
			if P := int64(len(comms)); got[0] != P*(P-1)/2 || got[1] != P || got[2] != -got[0] {
				errs[r] = fmt.Errorf("AllReduce after the failed Split: %v", got)
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
