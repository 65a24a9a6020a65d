package trainer

import (
	"context"
	"errors"
	"slices"
	"testing"
	"unsafe"

	"github.com/hiercomm/hiercomm"
	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nccl/ncclfake"
)

// fakeGPUWorld is a world of one process on nccl's in-process fake: an
// NCCL communicator, which takes device buffers only.
func fakeGPUWorld(t *testing.T) *hiercomm.World {
	t.Helper()
	w, err := hiercomm.Init(context.Background(), hiercomm.Options{
		GPU:    ncclfake.New(ncclfake.Options{Devices: 1}),
		Getenv: func(string) string { return "" }, // no launcher: a world of one
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if w.Device() == nil {
		t.Fatal("Init on the fake GPU returned a world on host memory")
	}
	return w
}

// TestHostStagesThroughTheDevice: a GPU world refuses the trainers' host
// values; Host stages them through device memory, so the call runs and
// its result comes back.
func TestHostStagesThroughTheDevice(t *testing.T) {
	ctx := context.Background()
	w := fakeGPUWorld(t)
	x := []float64{3, 4}
	if err := w.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("the GPU world's AllReduce of a host buffer: %v, want an argument error", err)
	}
	hc := Host(w, NewDevice(w.Device()))
	if err := hc.AllReduce(ctx, comm.Host(x), comm.Host(x), comm.Sum); err != nil || !slices.Equal(x, []float64{3, 4}) {
		t.Fatalf("staged AllReduce: %v, %v; want [3 4]", err, x)
	}
	all := make([]int64, 2)
	if err := hc.AllGather(ctx, comm.Host([]int64{7, 8}), comm.Host(all)); err != nil || !slices.Equal(all, []int64{7, 8}) {
		t.Fatalf("staged AllGather: %v, %v; want [7 8]", err, all)
	}
	if Host(w, nil) != comm.Communicator(w) {
		t.Error("Host on host memory is not the world itself")
	}
}

// TestVectorCopies: a Vector starts as zeros on both sides, its host copy
// is page-locked memory of the device (Free gives it back: freeing it again
// is refused), Put and Get move exactly the range asked for, and every copy
// is counted; without a Device a Vector is a Go slice.
func TestVectorCopies(t *testing.T) {
	w := fakeGPUWorld(t)
	d := NewDevice(w.Device())
	v, err := d.Vector(4)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Allocated(); got != 16 {
		t.Errorf("%d bytes of device memory, want 16", got)
	}
	if v.Buf(0, 4).OnHost() {
		t.Error("a device Vector's buffer is host memory")
	}
	if err := v.Get(0, 4); err != nil || !slices.Equal(v.Host, []float32{0, 0, 0, 0}) {
		t.Errorf("a new Vector's device copy: %v, %v; want zeros", v.Host, err)
	}
	copy(v.Host, []float32{1, 2, 3, 4})
	if err := v.Put(0, 4); err != nil {
		t.Fatal(err)
	}
	v.Host[1], v.Host[2] = 7, 9
	if err := v.Put(1, 1); err != nil { // element 1 only
		t.Fatal(err)
	}
	clear(v.Host)
	if err := v.Get(0, 4); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(v.Host, []float32{1, 7, 3, 4}) {
		t.Errorf("after Put(1, 1) and Get: %v, want [1 7 3 4]", v.Host)
	}
	if c := d.Copies(); c.H2DBytes != 16+16+4 || c.D2HBytes != 16+16 {
		t.Errorf("counted %d bytes host→device and %d back, want 36 and 32", c.H2DBytes, c.D2HBytes)
	}
	pinned := v.pinned
	if len(pinned) != 16 || &pinned[0] != (*byte)(unsafe.Pointer(&v.Host[0])) {
		t.Fatalf("the host copy is not the Vector's page-locked memory (%d bytes)", len(pinned))
	}
	v.Free()
	if got := d.Allocated(); got != 0 {
		t.Errorf("%d bytes of device memory after Free, want 0", got)
	}
	if err := w.Device().FreePinned(pinned); err == nil {
		t.Error("Free left the host copy allocated (freeing it again was accepted)")
	}

	var host *Device
	h, err := host.Vector(2)
	if err != nil || len(h.Host) != 2 || !h.Buf(0, 2).OnHost() || h.Put(0, 2) != nil || h.Get(0, 2) != nil || host.Copies() != (Copies{}) {
		t.Errorf("a Vector on host memory: %v, buffer on host %v, copies %v", err, h.Buf(0, 2).OnHost(), host.Copies())
	}
}

// TestDeviceAsksForTheGPUTier: -device makes Init require the GPU tier
// (HIERCOMM_INTRA reads nccl) and refuses a host tier named in the
// environment; without -device the environment is Init's own.
func TestDeviceAsksForTheGPUTier(t *testing.T) {
	t.Setenv(launchenv.EnvIntra, "")
	opt, err := Config{Device: true}.initOptions()
	if err != nil || opt.Getenv == nil || opt.Getenv(launchenv.EnvIntra) != "nccl" || opt.GPU != nil {
		t.Errorf("-device: %v; want Getenv to say %s=nccl and no library given", err, launchenv.EnvIntra)
	}
	if opt, _ := (Config{Device: true, FakeGPU: true}).initOptions(); opt.GPU == nil {
		t.Error("-device -fake-gpu: no fake library in the options")
	}
	if opt, err := (Config{}).initOptions(); err != nil || opt.Getenv != nil || opt.GPU != nil {
		t.Errorf("without -device: %+v, %v; want Init's defaults", opt, err)
	}
	t.Setenv(launchenv.EnvIntra, "shm")
	if _, err := (Config{Device: true}).initOptions(); err == nil {
		t.Errorf("-device with %s=shm: accepted", launchenv.EnvIntra)
	}
}
