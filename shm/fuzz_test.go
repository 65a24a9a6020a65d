package shm

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// alignedMem is n zeroed bytes aligned for 64-bit atomics, as a mapping is.
func alignedMem(n int) []byte {
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), n)
}

// segmentHeader is the header createSegment writes for layout l.
func segmentHeader(l layout, creator procID) []byte {
	h := make([]byte, hCreator+24)
	binary.LittleEndian.PutUint64(h[hMagic:], segMagic)
	binary.LittleEndian.PutUint32(h[hVersion:], segVersion)
	binary.LittleEndian.PutUint32(h[hSize:], uint32(l.P))
	binary.LittleEndian.PutUint64(h[hSlotBytes:], uint64(l.slotBytes))
	binary.LittleEndian.PutUint64(h[hRingBytes:], uint64(l.ringBytes))
	binary.LittleEndian.PutUint64(h[hTotal:], uint64(l.end))
	binary.LittleEndian.PutUint64(h[hStepBytes:], uint64(l.stepBytes))
	binary.LittleEndian.PutUint64(h[hEagerBytes:], uint64(l.eagerBytes))
	binary.LittleEndian.PutUint64(h[hCreator:], creator.pid)
	binary.LittleEndian.PutUint64(h[hCreator+8:], creator.start)
	binary.LittleEndian.PutUint64(h[hCreator+16:], creator.ns)
	return h
}

// FuzzSegmentHeader: the header of a segment file, which another process
// wrote (another build, a stale or scribbled-on file). layoutOf's geometry
// is used only when fits says so, and then every part a rank touches lies
// inside the mapping; inspect and openOnce, which judge files found in
// /dev/shm, read one with that header and any size without a panic.
func FuzzSegmentHeader(f *testing.F) {
	self := selfIdentity()
	for _, g := range []struct{ P, slot, step, eager int }{{1, minSlotBytes, DefaultStepBytes, 0}, {2, minSlotBytes, 1, 512}, {3, 3 * minSlotBytes, 4096, 1536}} {
		l := newLayout(g.P, g.slot, g.step, g.eager)
		f.Add(segmentHeader(l, self), uint16(l.end/pageBytes), uint16(g.P))
		f.Add(segmentHeader(l, procID{pid: 1 << 30, start: 1, ns: self.ns}), uint16(l.end/pageBytes), uint16(g.P))
	}
	bad := newLayout(2, minSlotBytes, 1, 0)
	bad.ringBytes = -pageBytes // a negative size once made end look small
	f.Add(segmentHeader(bad, procID{pid: 1 << 30, start: 1, ns: self.ns}), uint16(3), uint16(2))
	f.Add([]byte("HIERSHM1"), uint16(1), uint16(1))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, header []byte, pages, P uint16) {
		size := pageBytes * (1 + int(pages)%32)
		mem := alignedMem(size)
		copy(mem[:pageBytes], header)
		l := layoutOf(mem)
		if l.fits(int64(size)) {
			for r := range l.P {
				if l.ctl(r)+l.ctlBytes > l.ringCtlOff || l.meta(r, 1)+l.metaBytes > l.ctl(r)+l.ctlBytes ||
					l.slot(r) < l.slotsOff || l.slot(r)+l.slotBytes > l.ringsOff {
					t.Fatalf("rank %d's parts overlap in %+v", r, l)
				}
				for q := range l.P {
					if l.ringCtl(r, q)+2*lineBytes > l.slotsOff || l.ring(r, q)+l.ringBytes > l.eagerOff {
						t.Fatalf("ring %d→%d is out of place in %+v", r, q, l)
					}
				}
				if l.eagerBytes > 0 && (l.eagerLine(r) < l.eagerOff || l.eagerAt(r, eagerSlots-1, false)+l.eagerSlot > l.eagerLine(r)+l.eagerRank ||
					l.eagerAt(r, eagerSmallSlots-1, true)+eagerSmallSlot > l.eagerAt(r, 0, false) ||
					l.eagerLine(r)+l.eagerRank > l.end || mReason+l.eagerBytes > l.eagerSlot) {
					t.Fatalf("rank %d's eager area is out of place in %+v", r, l)
				}
			}
			if l.end > size {
				t.Fatalf("%+v fits %d bytes but ends at %d", l, size, l.end)
			}
			_ = wordsOf(mem, l, l.P-1)
		}
		// The file: the header page, then zeros (a sparse tail) to size.
		path := filepath.Join(dir, "seg")
		if err := os.WriteFile(path, mem[:pageBytes], 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, int64(size)); err != nil {
			t.Fatal(err)
		}
		inspect(path)
		if seg, _, err := openOnce(path, 1+int(P)%8); err == nil {
			if !seg.l.fits(int64(size)) {
				t.Fatalf("openOnce accepted %+v for %d bytes", seg.l, size)
			}
			seg.unmap()
		}
	})
}

// FuzzAbortRecord: a peer's abort record and its meta part (the header of
// a collective: sequence, status, Signature, reason, AllToAllV counts)
// hold whatever that peer wrote. Reading them never leaves them, the
// reason is cut to its field, and the error keeps the kind the code says.
func FuzzAbortRecord(f *testing.F) {
	f.Add(uint32(tier.FailPeer), int32(0), uint32(5), []byte("rank 0 failed: gone"), []byte{})
	f.Add(uint32(tier.FailTimeout), int32(-1), uint32(0xffffffff), []byte("deadline"), make([]byte, 600))
	f.Add(uint32(99), int32(1), uint32(3), []byte("abc"), []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80})
	l := newLayout(2, minSlotBytes, DefaultStepBytes, 0)
	f.Fuzz(func(t *testing.T, code uint32, peer int32, n uint32, text, meta []byte) {
		mem := alignedMem(l.end)
		c := &Comm{rank: 0, size: 2, seg: &segment{mem: mem, l: l}}
		c.words = []rankWords{wordsOf(mem, l, 0), wordsOf(mem, l, 1)}
		base := l.ctl(1) + cAbort
		binary.LittleEndian.PutUint32(mem[base+aCode:], code)
		binary.LittleEndian.PutUint32(mem[base+aPeer:], uint32(peer))
		binary.LittleEndian.PutUint32(mem[base+aLen:], n)
		copy(mem[base+aText:l.ctl(1)+cMeta], text)
		*c.words[1].state = stateAborted
		if _, ok := c.abortedAt(1); !ok {
			t.Fatal("an aborted rank is not seen as aborted")
		}
		err := c.abortError(1)
		var pe *comm.PeerError
		var re *comm.RemoteError
		switch {
		case errors.As(err, &pe):
			if tier.FailCode(code) != tier.FailPeer || pe.Peer != int(peer) || pe.Peer == c.rank {
				t.Fatalf("code %d, peer %d: %v", code, peer, err)
			}
		case errors.As(err, &re):
			if re.Peer != 1 || len(re.Reason) > len("it aborted the communicator: ")+abortText ||
				errors.Is(err, comm.ErrTimeout) != (tier.FailCode(code) == tier.FailTimeout) ||
				errors.Is(err, comm.ErrMismatch) != (tier.FailCode(code) == tier.FailMismatch) {
				t.Fatalf("code %d: %v (%+v)", code, err, re)
			}
		default:
			t.Fatalf("abortError = %v", err)
		}
		for part := range uint64(2) {
			copy(mem[l.meta(1, part):l.meta(1, part)+l.metaBytes], meta)
			s := &stepper{c: c, o: &op{seq: 1, sig: comm.Signature{Kind: comm.KindAllToAllV, Count: 1}}}
			m := s.meta(1, part)
			if len(m.reason) > maxReason {
				t.Fatalf("a reason of %d bytes", len(m.reason))
			}
			s.checkHeaders(part)
			s.checkCounts(part)
		}
	})
}
