package transport

import "testing"

// GetBuf gives the length asked, with a power-of-two capacity of at least
// 64 bytes, whether new or from the pool.
func TestBuffers(t *testing.T) {
	for _, n := range []int{1, 64, 65, 1000, 1 << 20, MaxFrame} {
		b := GetBuf(n)
		if len(b) != n || cap(b)&(cap(b)-1) != 0 || cap(b) < 64 {
			t.Errorf("GetBuf(%d): len %d cap %d", n, len(b), cap(b))
		}
		PutBuf(b)
		if b := GetBuf(n); len(b) != n || cap(b) < n {
			t.Errorf("GetBuf(%d) after a PutBuf: len %d cap %d", n, len(b), cap(b))
		}
	}
	if b := GetBuf(0); b != nil {
		t.Errorf("GetBuf(0) = %v, want nil", b)
	}
}

// Known is true of the frame kinds a Handler is given and of nothing else.
func TestFrameKindKnown(t *testing.T) {
	for k := FrameData; k <= FrameProgressReply; k++ {
		if !k.Known() || k.String() == "frame(?)" {
			t.Errorf("kind %d (%v) is not known", k, k)
		}
	}
	for _, k := range []FrameKind{0, FrameProgressReply + 1, 0xfe, 0xff} {
		if k.Known() {
			t.Errorf("kind %d is known", k)
		}
	}
}
