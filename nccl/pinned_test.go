package nccl_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nccl/ncclfake"
)

// TestAllocPinned: memory from AllocPinned is zeroed, Write copies it to the
// device from where it is (the fake refuses an asynchronous copy from
// pageable memory, and the device's own staging buffers stay untouched),
// a range inside it too, and Read brings it back; Go memory still goes
// through the staging; FreePinned frees what AllocPinned gave and refuses
// anything else, freeing nothing then.
func TestAllocPinned(t *testing.T) {
	dev, err := ncclfake.New(ncclfake.Options{}).Device(0)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3<<20 + 5
	host, err := dev.AllocPinned(n)
	if err != nil {
		t.Fatal(err)
	}
	if len(host) != n || bytes.ContainsFunc(host, func(r rune) bool { return r != 0 }) {
		t.Fatalf("AllocPinned(%d): %d bytes, not all zero", n, len(host))
	}
	for i := range host {
		host[i] = byte(i*7 + 3)
	}
	buf, err := dev.Alloc(comm.U8, n)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Free(buf)
	if err := dev.Write(buf, host); err != nil {
		t.Fatal(err)
	}
	if err := dev.Write(buf.Slice(100, 1000), host[100:1100]); err != nil { // a range inside it
		t.Fatal(err)
	}
	if s := nccl.Staging(dev); s != 0 {
		t.Errorf("Write from pinned memory used %d staging buffers, want none", s)
	}
	back, err := dev.AllocPinned(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Read(back, buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, host) {
		t.Error("Read did not bring back what Write put from pinned memory")
	}
	goMem := bytes.Repeat([]byte{9}, 4096)
	if err := dev.Write(buf.Slice(0, 4096), goMem); err != nil {
		t.Fatal(err)
	}
	if nccl.Staging(dev) == 0 {
		t.Error("Write from Go memory left no staging buffer: did it copy from pageable memory?")
	}

	for _, bad := range []struct {
		name string
		b    []byte
	}{{"Go memory", goMem}, {"a slice from inside", host[1:]}} {
		if err := dev.FreePinned(bad.b); err == nil || !strings.Contains(err.Error(), "not the start of a live allocation of AllocPinned") {
			t.Errorf("FreePinned(%s): %v, want the error that names it", bad.name, err)
		}
	}
	if err := dev.FreePinned(host[:10]); err != nil { // its start, any length
		t.Fatalf("FreePinned: %v", err)
	}
	if err := dev.FreePinned(host); err == nil {
		t.Error("FreePinned twice: no error")
	}
	if err := dev.FreePinned(back); err != nil {
		t.Fatal(err)
	}
	if err := dev.FreePinned(nil); err != nil {
		t.Errorf("FreePinned(nil): %v", err)
	}
	if b, err := dev.AllocPinned(0); err != nil || len(b) != 0 {
		t.Errorf("AllocPinned(0): %d bytes, %v", len(b), err)
	}
	if _, err := dev.AllocPinned(-1); err == nil || !strings.Contains(err.Error(), "want n ≥ 0") {
		t.Errorf("AllocPinned(-1): %v", err)
	}
}
