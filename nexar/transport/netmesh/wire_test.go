package netmesh

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

func TestHeaderRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		h    transport.Header
	}{
		{"zero payload data", transport.Header{Kind: transport.FrameData}},
		{"allreduce", transport.Header{Kind: transport.FrameData, Comm: 7, Seq: 41, Step: 3,
			Sig: comm.Signature{Kind: comm.KindAllReduce, DType: comm.F32, Op: comm.ReduceOp(1), Root: -1, Count: 1 << 20}, Len: 4096}},
		{"p2p tag in root", transport.Header{Kind: transport.FrameP2P, Seq: 1, Step: 9, Sig: comm.Signature{Kind: comm.KindSend, DType: comm.U8, Root: 12345, Count: -1}, Len: 1}},
		{"fail", transport.Header{Kind: transport.FrameFail, Comm: math.MaxUint64, Seq: math.MaxUint64, Step: math.MaxUint32, Len: 100}},
		{"probe", transport.Header{Kind: transport.FrameProbe, Sig: comm.Signature{Root: math.MinInt32, Count: math.MinInt64}}},
		{"probe reply", transport.Header{Kind: transport.FrameProbeReply, Sig: comm.Signature{Root: math.MaxInt32, Count: math.MaxInt64}, Len: transport.MaxFrame}},
		{"all bytes of sig", transport.Header{Kind: transport.FrameData, Sig: comm.Signature{Kind: 255, DType: 255, Op: 255}}},
		{"phase of a hierarchy's call", transport.Header{Kind: transport.FrameData, Seq: 2, Sig: comm.Signature{Kind: comm.KindReduceScatter, DType: comm.F32, Op: comm.Sum, Root: -1, Count: 5,
			Outer: tier.OuterAt(comm.Signature{Kind: comm.KindAllReduce, DType: comm.F32, Op: comm.Avg, Root: -1, Count: 17}, 0)}}},
		{"closed", transport.Header{Kind: transport.FrameClosed, Comm: 9, Sig: comm.Signature{Count: 12}}},
		{"peer down", transport.Header{Kind: transport.FramePeerDown, Seq: 2, Sig: comm.Signature{Root: 3}, Len: 40}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := appendHeader([]byte("prefix"), tt.h)
			if len(b) != len("prefix")+HeaderSize {
				t.Fatalf("appendHeader wrote %d bytes, want %d", len(b)-len("prefix"), HeaderSize)
			}
			got, err := decodeHeader(b[len("prefix"):])
			if err != nil {
				t.Fatalf("decodeHeader: %v", err)
			}
			if got != tt.h {
				t.Fatalf("round trip: got %+v, want %+v", got, tt.h)
			}
			var p [HeaderSize]byte
			putHeader(p[:], tt.h)
			if !bytes.Equal(p[:], b[len("prefix"):]) {
				t.Fatalf("putHeader and appendHeader disagree:\n%x\n%x", p, b[len("prefix"):])
			}
		})
	}
}

// TestHeaderLayout pins the byte layout, so that a change of field order is
// a deliberate wire-version change and not an accident.
func TestHeaderLayout(t *testing.T) {
	h := transport.Header{Kind: transport.FrameP2P, Comm: 0x0102030405060708, Seq: 0x1112131415161718, Step: 0x21222324,
		Sig: comm.Signature{Kind: 0x31, DType: 0x32, Op: 0x33, Root: 0x41424344, Count: 0x5152535455565758,
			Outer: comm.Outer{Kind: 0x34, DType: 0x35, Op: 0x36, Hash: 0x71727374}}, Len: 0x00616263}
	want := []byte{
		5, 2, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36,
		8, 7, 6, 5, 4, 3, 2, 1,
		0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,
		0x24, 0x23, 0x22, 0x21,
		0x44, 0x43, 0x42, 0x41,
		0x58, 0x57, 0x56, 0x55, 0x54, 0x53, 0x52, 0x51,
		0x63, 0x62, 0x61, 0,
		0x74, 0x73, 0x72, 0x71,
	}
	if got := appendHeader(nil, h); !bytes.Equal(got, want) {
		t.Fatalf("layout:\n got %x\nwant %x", got, want)
	}
}

func TestDecodeHeaderRefuses(t *testing.T) {
	good := appendHeader(nil, transport.Header{Kind: transport.FrameData, Len: 10})
	mod := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	tests := []struct {
		name, field string
		b           []byte
	}{
		{"short", "size", good[:HeaderSize-1]},
		{"empty", "size", nil},
		{"version 0", "version", mod(func(b []byte) { b[0] = 0 })},
		{"version 1", "version", mod(func(b []byte) { b[0] = 1 })},
		{"version 2", "version", mod(func(b []byte) { b[0] = 2 })},
		{"version 3", "version", mod(func(b []byte) { b[0] = 3 })},
		{"version 4", "version", mod(func(b []byte) { b[0] = 4 })},
		{"version 6", "version", mod(func(b []byte) { b[0] = 6 })},
		{"kind 0", "kind", mod(func(b []byte) { b[1] = 0 })},
		{"kind end", "kind", mod(func(b []byte) { b[1] = byte(kindEnd()) })},
		{"goodbye", "kind", goodbyeRecord},
		{"len over MaxFrame", "length", appendHeader(nil, transport.Header{Kind: transport.FrameData, Len: transport.MaxFrame + 1})},
		{"len max", "length", appendHeader(nil, transport.Header{Kind: transport.FrameData, Len: math.MaxUint32})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeHeader(tt.b)
			var he *HeaderError
			if !errors.As(err, &he) {
				t.Fatalf("decodeHeader = %v, want a *HeaderError", err)
			}
			if he.Field != tt.field {
				t.Fatalf("refused for %q (%v), want %q", he.Field, err, tt.field)
			}
		})
	}
}

func TestReadFrames(t *testing.T) {
	frames := []struct {
		h       transport.Header
		payload []byte
	}{
		{transport.Header{Kind: transport.FrameData, Seq: 1}, nil},
		{transport.Header{Kind: transport.FrameData, Seq: 2}, []byte{42}},
		{transport.Header{Kind: transport.FrameP2P, Seq: 3}, bytes.Repeat([]byte("ab"), coalesceMax)}, // two writes
		{transport.Header{Kind: transport.FrameFail, Seq: 4}, []byte("reason")},
	}
	var stream bytes.Buffer
	for _, f := range frames {
		if err := writeFrame(&stream, f.h, f.payload); err != nil {
			t.Fatal(err)
		}
	}
	body := bytes.Clone(stream.Bytes())

	check := func(t *testing.T, r io.Reader, wantErr func(error) bool) {
		t.Helper()
		i := 0
		err := readFrames(r, func(h transport.Header, p []byte) {
			if i >= len(frames) {
				t.Fatalf("extra frame %+v", h)
			}
			want := frames[i].h
			want.Len = uint32(len(frames[i].payload))
			if h != want || !bytes.Equal(p, frames[i].payload) {
				t.Fatalf("frame %d: got %+v (%d bytes), want %+v", i, h, len(p), want)
			}
			i++
		})
		if i != len(frames) {
			t.Fatalf("got %d frames, want %d (err %v)", i, len(frames), err)
		}
		if !wantErr(err) {
			t.Fatalf("readFrames returned %v", err)
		}
	}
	t.Run("goodbye", func(t *testing.T) {
		check(t, io.MultiReader(bytes.NewReader(body), bytes.NewReader(goodbyeRecord)), func(err error) bool { return err == nil })
	})
	t.Run("no goodbye", func(t *testing.T) {
		check(t, bytes.NewReader(body), func(err error) bool { return err == errNoGoodbye })
	})
	t.Run("cut in a payload", func(t *testing.T) {
		r := io.MultiReader(bytes.NewReader(body), bytes.NewReader(appendHeader(nil, transport.Header{Kind: transport.FrameData, Len: 5})), strings.NewReader("abc"))
		check(t, r, func(err error) bool { return err == io.ErrUnexpectedEOF })
	})
	t.Run("data after goodbye", func(t *testing.T) {
		r := io.MultiReader(bytes.NewReader(body), bytes.NewReader(goodbyeRecord), strings.NewReader("x"))
		check(t, r, func(err error) bool {
			var he *HeaderError
			return errors.As(err, &he)
		})
	})
}

func FuzzDecodeHeader(f *testing.F) {
	f.Add(appendHeader(nil, transport.Header{Kind: transport.FrameData, Len: 10}))
	f.Add(appendHeader(nil, transport.Header{Kind: transport.FrameProbeReply, Comm: 3, Seq: 9, Step: 2,
		Sig: comm.Signature{Kind: comm.KindBroadcast, DType: comm.F64, Root: 2, Count: 1000}, Len: transport.MaxFrame}))
	f.Add(appendHeader(nil, transport.Header{Kind: transport.FrameP2P, Sig: comm.Signature{Root: -1, Count: -1}}))
	f.Add(goodbyeRecord)
	f.Add([]byte{1, 1})
	f.Add(make([]byte, HeaderSize))
	f.Add(bytes.Repeat([]byte{0xff}, HeaderSize+3))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b)
		if err != nil {
			if h != (transport.Header{}) {
				t.Fatalf("decodeHeader returned %+v with error %v", h, err)
			}
			return
		}
		if h.Len > transport.MaxFrame || !h.Kind.Known() {
			t.Fatalf("decodeHeader accepted %+v", h)
		}
		if enc := appendHeader(nil, h); !bytes.Equal(enc, b[:HeaderSize]) {
			t.Fatalf("encode(decode(b)) != b:\n%x\n%x", enc, b[:HeaderSize])
		}
		h2, err := decodeHeader(appendHeader(nil, h))
		if err != nil || h2 != h {
			t.Fatalf("decode(encode(h)) = %+v, %v; want %+v", h2, err, h)
		}
	})
}

// kindEnd is the first frame kind past the known ones.
func kindEnd() transport.FrameKind {
	k := transport.FrameKind(1)
	for k.Known() {
		k++
	}
	return k
}
