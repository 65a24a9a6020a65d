package nccl

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

// GPU-only tests that need the package's unexported copy paths. Like every
// TestGPU* test they run on a GPU host (make gpu-test, gpu-bin/run.sh) and
// skip elsewhere with nccl.Available's reason.

// gpuTestDevice is device 0 of the real libraries (Default), or the test
// skips saying why this machine has none.
// GPUTestDevice is gpuTestDevice for the package's external tests.
var GPUTestDevice = gpuTestDevice

func gpuTestDevice(t *testing.T) *Device {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("no GPU here: %v", err)
	}
	lib, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	dev, err := lib.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

// TestGPULibrary logs what Default loaded (files, CUDA driver API and
// NCCL versions) and the devices, so that every GPU run's log says what it
// ran on. It is the first GPU test of the package's test binary.
func TestGPULibrary(t *testing.T) {
	lib, err := Default()
	if err != nil {
		t.Skipf("no GPU here: %v", err)
	}
	v := lib.DriverVersion()
	t.Logf("gpu-library: %v", lib)
	t.Logf("gpu-library: CUDA driver API %d.%d, NCCL %s", v/1000, v%1000/10, ncclVersionString(lib.NCCLVersion()))
	if err := Available(); err != nil {
		t.Skipf("no GPU here: %v", err)
	}
	n, err := lib.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	dev, err := lib.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gpu-library: %d device(s) visible; the tests use %v", n, dev)
}

// TestGPUCopyRates measures host↔device copies through the package's own
// paths: page-locked memory (allocHost) through the copy stream (toDevice,
// toHost: what Staged and the stagers use) against Go memory through
// Device.Write and Device.Read (pageable: Write stages it, the driver
// stages Read), and memory from AllocPinned through Write and Read (what
// the trainers use). It checks that each path moves the bytes exactly and
// logs GB/s (10⁹ bytes per second, the median of many copies); speed is
// reported, not asserted.
func TestGPUCopyRates(t *testing.T) {
	dev := gpuTestDevice(t)
	var table strings.Builder
	fmt.Fprintf(&table, "%10s %12s %12s %14s %14s %17s %17s   (GB/s, median)\n", "size", "pinned H2D", "pinned D2H", "pageable H2D", "pageable D2H", "AllocPinned H2D", "AllocPinned D2H")
	for _, size := range []int{1 << 20, 4 << 20, 64 << 20} {
		buf, err := dev.Alloc(comm.U8, size)
		if err != nil {
			t.Fatal(err)
		}
		pin, err := dev.allocHost(size)
		if err != nil {
			dev.Free(buf)
			t.Fatal(err)
		}
		page := make([]byte, size)
		user, err := dev.AllocPinned(size)
		if err != nil {
			dev.freeHost(pin)
			dev.Free(buf)
			t.Fatal(err)
		}
		rates, err := gpuCopyRates(dev, buf, pin, page, user)
		dev.freeHost(pin)
		dev.Free(buf)
		if ferr := dev.FreePinned(user); ferr != nil && err == nil {
			err = ferr
		}
		if err != nil {
			t.Fatalf("%d MiB: %v", size>>20, err)
		}
		fmt.Fprintf(&table, "%7d MiB %12.1f %12.1f %14.1f %14.1f %17.1f %17.1f\n", size>>20, rates[0], rates[1], rates[2], rates[3], rates[4], rates[5])
	}
	t.Logf("host↔device copies on %v:\n%s", dev, table.String())
}

// gpuCopyRates checks that every path moves bytes exactly, each way, and
// then times them: pinned H2D, pinned D2H, pageable H2D, pageable D2H,
// and Write and Read of user (from AllocPinned), in GB/s.
func gpuCopyRates(dev *Device, buf comm.Buffer, pin pinnedBuf, page, user []byte) ([6]float64, error) {
	var rates [6]float64
	size := len(page)
	fill := func(b []byte, seed int) {
		for i := range b {
			b[i] = byte(i*7 + i>>11 + seed)
		}
	}
	// Each path in and out, checked against another: pinned in, pageable
	// out; pageable in, pinned out; AllocPinned's memory in, pinned out;
	// pinned in, AllocPinned's out.
	for k, rt := range []struct {
		what     string
		src, dst []byte
		in, out  func() error
	}{
		{"pinned write then pageable read", pin.bytes, page, func() error { return dev.toDevice(buf, pin) }, func() error { return dev.Read(page, buf) }},
		{"pageable write then pinned read", page, pin.bytes, func() error { return dev.Write(buf, page) }, func() error { return dev.toHost(pin, buf) }},
		{"Write from AllocPinned memory then pinned read", user, pin.bytes, func() error { return dev.Write(buf, user) }, func() error { return dev.toHost(pin, buf) }},
		{"pinned write then Read into AllocPinned memory", pin.bytes, user, func() error { return dev.toDevice(buf, pin) }, func() error { return dev.Read(user, buf) }},
	} {
		fill(rt.src, k+1)
		if err := rt.in(); err != nil {
			return rates, err
		}
		if err := rt.out(); err != nil {
			return rates, err
		}
		if i := gpuFirstDiff(rt.dst, rt.src); i >= 0 {
			return rates, fmt.Errorf("%s: byte %d is %d, want %d", rt.what, i, rt.dst[i], rt.src[i])
		}
	}

	iters := max(10, (256<<20)/size)
	for k, copyOnce := range []func() error{
		func() error { return dev.toDevice(buf, pin) },
		func() error { return dev.toHost(pin, buf) },
		func() error { return dev.Write(buf, page) },
		func() error { return dev.Read(page, buf) },
		func() error { return dev.Write(buf, user) },
		func() error { return dev.Read(user, buf) },
	} {
		med, err := gpuMedianTime(2, iters, copyOnce)
		if err != nil {
			return rates, err
		}
		rates[k] = float64(size) / med.Seconds() / 1e9
	}
	return rates, nil
}

// gpuMedianTime runs f warmup times, then iters times, and returns the
// median time of one call.
func gpuMedianTime(warmup, iters int, f func() error) (time.Duration, error) {
	for range warmup {
		if err := f(); err != nil {
			return 0, err
		}
	}
	times := make([]time.Duration, iters)
	for i := range times {
		start := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		times[i] = time.Since(start)
	}
	slices.Sort(times)
	return times[len(times)/2], nil
}

// gpuFirstDiff is the first index where a and b differ, or -1.
func gpuFirstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
