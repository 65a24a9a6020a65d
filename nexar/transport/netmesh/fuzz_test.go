package netmesh

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// The decoders of bytes a peer sends, beside FuzzDecodeHeader (wire_test.go):
// a whole stream of frames, and the hellos that open a connection. None
// may panic, and whatever they accept must re-encode to the bytes read.

// FuzzReadFrames feeds readFrames an arbitrary stream: it must deliver
// frames whose payloads have their header's length, end with one of the
// errors it documents, and, when it accepts the whole stream, have read
// exactly the frames (and goodbye) that re-encode to it. A payload is
// allocated only after its header passed decodeHeader (length ≤ MaxFrame).
func FuzzReadFrames(f *testing.F) {
	var stream []byte
	for i, h := range []transport.Header{
		{Kind: transport.FrameData, Comm: 1, Seq: 2, Step: 3, Sig: comm.Signature{Kind: comm.KindAllReduce, DType: comm.F32, Op: comm.Sum, Count: 4}},
		{Kind: transport.FrameP2P, Seq: 1, Sig: comm.Signature{Root: 7, Count: -1}},
		{Kind: transport.FrameFail, Seq: 9, Step: uint32(tier.FailPeer)},
		{Kind: transport.FrameClosed, Sig: comm.Signature{Count: 12}},
		{Kind: transport.FramePeerDown, Seq: 2, Sig: comm.Signature{Root: 3}},
	} {
		stream = appendHeader(stream, transport.Header{Kind: h.Kind, Comm: h.Comm, Seq: h.Seq, Step: h.Step, Sig: h.Sig, Len: uint32(i * 3)})
		stream = append(stream, bytes.Repeat([]byte{byte(i)}, i*3)...)
	}
	f.Add(stream)
	f.Add(append(bytes.Clone(stream), goodbyeRecord...))
	f.Add(append(append(bytes.Clone(stream), goodbyeRecord...), 0))
	f.Add(appendHeader(nil, transport.Header{Kind: transport.FrameData, Len: transport.MaxFrame}))
	f.Add(stream[:HeaderSize+1])
	f.Add(append(append(bytes.Clone(heartbeatRecord), stream...), expelRecord...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var again []byte
		err := readFrames(bytes.NewReader(b), func(h transport.Header, p []byte) {
			if int(h.Len) != len(p) || h.Len > transport.MaxFrame {
				t.Fatalf("delivered a payload of %d bytes for a header of %d", len(p), h.Len)
			}
			again = append(appendHeader(again, h), p...)
		})
		var he *HeaderError
		switch {
		case err == nil:
			again = append(again, goodbyeRecord...)
			fallthrough
		case err == errNoGoodbye:
			if !bytes.Equal(again, b) {
				t.Fatalf("readFrames accepted the stream (%v), but its frames re-encode to other bytes:\n%x\n%x", err, again, b)
			}
		case errors.As(err, &he), err == io.ErrUnexpectedEOF, err == errGaveUp:
			if !bytes.HasPrefix(b, again) {
				t.Fatalf("the frames delivered before %v are not the stream's start", err)
			}
		default:
			t.Fatalf("readFrames: %v, not an error it documents", err)
		}
	})
}

// FuzzReadHello: the QUIC hello a connection's stream opens with. Only
// the hello expected passes, and it is the bytes read.
func FuzzReadHello(f *testing.F) {
	want := hello{from: 3, to: 1, idx: -1, conns: 2}
	f.Add(hello{from: 3, to: 1, idx: 1, conns: 2}.encode())
	f.Add(hello{from: 3, to: 1, idx: 2, conns: 2}.encode())
	f.Add(hello{from: 1, to: 3, idx: 0, conns: 2}.encode())
	f.Add([]byte("hcq1"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := readHello(bytes.NewReader(b), want)
		if err != nil {
			return
		}
		if got.from != want.from || got.to != want.to || got.conns != want.conns || got.idx < 0 || got.idx >= want.conns {
			t.Fatalf("readHello accepted %+v, want from %d to %d of %d connections", got, want.from, want.to, want.conns)
		}
		if !bytes.Equal(got.encode(), b[:helloSize]) {
			t.Fatalf("accepted hello %+v re-encodes to %x, read %x", got, got.encode(), b[:helloSize])
		}
	})
}

// FuzzDecodeTCPHello: the TCP hello, the first bytes a dialer sends before
// it has proven the job key (so anyone who reaches the port can send
// them). The acceptor reads exactly tcpHelloSize bytes and decodes them;
// the fuzz input is cut or zero-padded to that. A hello that decodes
// re-encodes to the same bytes.
func FuzzDecodeTCPHello(f *testing.F) {
	tr := &tcpTransport{m: &mesh{cfg: Config{ConnsPerPeer: 2}}}
	f.Add(tr.encodeHello(1, 0, 1, bytes.Repeat([]byte{7}, 32)))
	f.Add([]byte("hct1"))
	f.Add(bytes.Repeat([]byte{0xff}, tcpHelloSize))
	f.Fuzz(func(t *testing.T, in []byte) {
		b := make([]byte, tcpHelloSize)
		copy(b, in)
		h, nonce, err := decodeTCPHello(b)
		if err != nil {
			if !bytes.Equal(b[:4], tcpMagic[:]) {
				return
			}
			t.Fatalf("a hello with the magic was refused: %v", err)
		}
		if len(nonce) != 32 {
			t.Fatalf("nonce of %d bytes", len(nonce))
		}
		tr := &tcpTransport{m: &mesh{cfg: Config{ConnsPerPeer: h.conns}}}
		if enc := tr.encodeHello(h.from, h.to, h.idx, nonce); !bytes.Equal(enc, b) {
			t.Fatalf("decoded %+v re-encodes to %x, read %x", h, enc, b)
		}
	})
}
