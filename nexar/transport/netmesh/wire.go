package netmesh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// The wire form of a frame on a byte stream (a QUIC stream or a TCP
// connection) is HeaderSize bytes of header followed by Len bytes of payload,
// back to back, one frame after another. All integers are little-endian.
//
//	off size field
//	  0    1 version (wireVersion)
//	  1    1 frame kind (FrameKind)
//	  2    1 Sig.Kind
//	  3    1 Sig.DType
//	  4    1 Sig.Op
//	  5    1 Sig.Outer.Kind
//	  6    1 Sig.Outer.DType
//	  7    1 Sig.Outer.Op
//	  8    8 Comm
//	 16    8 Seq
//	 24    4 Step
//	 28    4 Sig.Root (int32)
//	 32    8 Sig.Count (int64)
//	 40    4 Len
//	 44    4 Sig.Outer.Hash
//
// A sender that closes gracefully ends each of its streams with a goodbye
// record (a header of kind frameGoodbye, everything else zero) and then the
// end of the stream. The goodbye lets a receiver tell a peer that closed
// (goodbye, then end of stream) from one whose process died (TCP: end of
// stream or reset without a goodbye). It never reaches a Handler.

// HeaderSize is the size of an encoded Header.
const HeaderSize = 48

// wireVersion is the first byte of every header. A receiver refuses any
// other: the peer runs an incompatible hiercomm.
const wireVersion = 5 // 2: Sig.Outer in what were reserved bytes; 3: FramePeerDown; 4: FrameProgress; 5: its reply carries comm.Progress

// frameGoodbye is the transport-internal kind of the goodbye record.
// decodeHeader refuses it like any other unknown kind; read loops test for
// it with isGoodbye first.
const frameGoodbye transport.FrameKind = 0xff

// putHeader encodes h into b[:HeaderSize]. b must be at least HeaderSize long.
func putHeader(b []byte, h transport.Header) {
	b = b[:HeaderSize]
	b[0] = wireVersion
	b[1] = byte(h.Kind)
	b[2] = byte(h.Sig.Kind)
	b[3] = byte(h.Sig.DType)
	b[4] = byte(h.Sig.Op)
	b[5], b[6], b[7] = byte(h.Sig.Outer.Kind), byte(h.Sig.Outer.DType), byte(h.Sig.Outer.Op)
	binary.LittleEndian.PutUint64(b[8:], h.Comm)
	binary.LittleEndian.PutUint64(b[16:], h.Seq)
	binary.LittleEndian.PutUint32(b[24:], h.Step)
	binary.LittleEndian.PutUint32(b[28:], uint32(h.Sig.Root))
	binary.LittleEndian.PutUint64(b[32:], uint64(h.Sig.Count))
	binary.LittleEndian.PutUint32(b[40:], h.Len)
	binary.LittleEndian.PutUint32(b[44:], h.Sig.Outer.Hash)
}

// HeaderError says why bytes read from a peer are not a valid frame header.
// A stream that carries one is corrupt from that point on, so the transport
// treats it as a failure of the peer.
type HeaderError struct {
	Field   string // "version", "kind", "length", "reserved" or "size"
	Problem string
}

func (e *HeaderError) Error() string {
	return "nexar: bad frame header: " + e.Field + ": " + e.Problem
}

// decodeHeader decodes the first HeaderSize bytes of b. It refuses a header
// of another wire version, of an unknown frame kind, with a payload length
// above MaxFrame or with reserved bytes set, so that nothing is allocated
// for a corrupt or foreign stream. Every header it accepts re-encodes to the
// same bytes.
func decodeHeader(b []byte) (transport.Header, error) {
	if len(b) < HeaderSize {
		return transport.Header{}, &HeaderError{"size", fmt.Sprintf("%d bytes, need %d", len(b), HeaderSize)}
	}
	if b[0] != wireVersion {
		return transport.Header{}, &HeaderError{"version", fmt.Sprintf("wire version %d, this build speaks %d: every rank must run the same hiercomm release", b[0], wireVersion)}
	}
	k := transport.FrameKind(b[1])
	if !k.Known() {
		return transport.Header{}, &HeaderError{"kind", fmt.Sprintf("unknown frame kind %d", b[1])}
	}
	h := transport.Header{
		Kind: k,
		Sig: comm.Signature{
			Kind:  comm.Kind(b[2]),
			DType: comm.DType(b[3]),
			Op:    comm.ReduceOp(b[4]),
			Root:  int32(binary.LittleEndian.Uint32(b[28:])),
			Count: int64(binary.LittleEndian.Uint64(b[32:])),
			Outer: comm.Outer{Kind: comm.Kind(b[5]), DType: comm.DType(b[6]), Op: comm.ReduceOp(b[7]),
				Hash: binary.LittleEndian.Uint32(b[44:])},
		},
		Comm: binary.LittleEndian.Uint64(b[8:]),
		Seq:  binary.LittleEndian.Uint64(b[16:]),
		Step: binary.LittleEndian.Uint32(b[24:]),
		Len:  binary.LittleEndian.Uint32(b[40:]),
	}
	if h.Len > transport.MaxFrame {
		return transport.Header{}, &HeaderError{"length", fmt.Sprintf("payload of %d bytes exceeds MaxFrame (%d)", h.Len, transport.MaxFrame)}
	}
	return h, nil
}

// goodbyeRecord is the goodbye record, see above.
var goodbyeRecord = record(frameGoodbye)

// The TCP transport's own records (heartbeat.go), which like the goodbye
// never reach a Handler: a heartbeat, written on a link that carried
// nothing for a while, only tells the reader the peer is there; the expel record, written
// by a rank that gives its peer up just before it ends the link, makes
// the peer's read fail with errGaveUp (the peer then knows it was
// expelled, and does not take the link's end for this rank's death).
const (
	frameHeartbeat transport.FrameKind = 0xfe
	frameExpel     transport.FrameKind = 0xfd
)

var (
	heartbeatRecord = record(frameHeartbeat)
	expelRecord     = record(frameExpel)
)

// errGaveUp: the peer wrote the expel record.
var errGaveUp = errors.New("it gave this rank up (it found this rank silent for longer than FailureTimeout, or heard that it failed) and ended the connection")

// record is the header of a transport-internal kind, everything else zero.
func record(k transport.FrameKind) []byte {
	b := make([]byte, HeaderSize)
	b[0], b[1] = wireVersion, byte(k)
	return b
}

// isGoodbye reports whether b holds the goodbye record.
func isGoodbye(b []byte) bool { return isRecord(b, goodbyeRecord) }

// isRecord reports whether b starts with the transport-internal record rec.
func isRecord(b, rec []byte) bool {
	return len(b) >= HeaderSize && string(b[:HeaderSize]) == string(rec)
}

// coalesceMax is the largest payload that writeFrame copies behind its header
// so that header and payload leave in one write; larger payloads go out as
// two writes (one writev on a TCP connection).
const coalesceMax = 32 << 10

// writeFrame writes one frame to w: header h with h.Len set from payload,
// then payload. The caller serializes writers of one stream.
func writeFrame(w io.Writer, h transport.Header, payload []byte) error {
	h.Len = uint32(len(payload))
	if len(payload) <= coalesceMax {
		b := transport.GetBuf(HeaderSize + len(payload))
		putHeader(b, h)
		copy(b[HeaderSize:], payload)
		_, err := w.Write(b)
		transport.PutBuf(b)
		return err
	}
	var hb [HeaderSize]byte
	putHeader(hb[:], h)
	bufs := net.Buffers{hb[:], payload}
	_, err := bufs.WriteTo(w)
	return err
}

// errNoGoodbye: a stream ended without the goodbye record. Over TCP this is
// how a process that exited or was killed looks.
var errNoGoodbye = errors.New("its connection ended without a goodbye: the process exited or was killed")

// readFrames reads frames from r until the stream ends, handing each to
// deliver with a payload from transport.GetBuf (a heartbeat too, as a header of kind
// frameHeartbeat with no payload: the caller skips it). It returns
// nil when the stream ended with a goodbye record, errNoGoodbye when it
// ended at a frame boundary without one, errGaveUp at an expel record, and
// otherwise the read or decode error.
func readFrames(r io.Reader, deliver func(transport.Header, []byte)) error {
	fr := newFrameReader()
	defer fr.release()
	for {
		switch err := fr.read(r.Read, deliver); err {
		case nil:
		case errEnded:
			return nil
		default:
			return err
		}
	}
}

// frameReader decodes the frames of one byte stream as its bytes arrive,
// in pieces of any size: readFrames drives it with blocking reads, a TCP
// link's pump (pump.go) with non-blocking ones, from whichever goroutine
// holds the link. Small frames are read in bulk into a staging buffer
// and copied out; the rest of a large payload is read straight into it.
type frameReader struct {
	stage   []byte // staging: stage[r:w] is read and not yet decoded
	r, w    int
	filling bool             // a frame's payload is being filled
	h       transport.Header // that frame
	payload []byte
	got     int  // bytes of payload filled
	goodbye bool // the goodbye record came: only the end of the stream may follow
	// bulk: the last frame was large. Large frames come in runs (a
	// pipelined message), so the next read takes a header alone, and
	// the payload after it, if large too, goes straight into its buffer
	// rather than through the staging buffer.
	bulk bool
	// place, if set, names the memory a large data frame's payload is to
	// be read into, given its header (nil: a pooled buffer), and landed
	// takes such a frame in place of deliver (transport.Placer). placed: the
	// payload being filled is such memory, never the pool's.
	place  func(transport.Header) []byte
	landed func(transport.Header, []byte)
	placed bool
}

// stageSize is a frameReader's staging buffer: a read takes up to this
// much, so a burst of small frames costs one system call.
const stageSize = 64 << 10

func newFrameReader() *frameReader { return &frameReader{stage: transport.GetBuf(stageSize)} }

// release gives back the buffers; the reader is not used again.
func (fr *frameReader) release() {
	transport.PutBuf(fr.stage)
	if !fr.placed {
		transport.PutBuf(fr.payload)
	}
	fr.stage, fr.payload, fr.placed = nil, nil, false
}

// divert makes sure the reader writes no more into buf, a landing it may
// be filling (transport.Placer): the rest of that frame goes to a pooled buffer
// (with what has come of it so far), and the frame is delivered as any
// other.
func (fr *frameReader) divert(buf []byte) {
	if !fr.placed || !fr.filling || len(buf) == 0 || &fr.payload[0] != &buf[0] {
		return
	}
	b := transport.GetBuf(len(buf))
	copy(b, buf[:fr.got])
	fr.payload, fr.placed = b, false
}

// read makes one call of src and delivers every frame the bytes
// complete. It returns src's error as it is (a non-blocking source's
// "would block" included), except for the end of the stream, which it
// judges as readFrames says: nil becomes errNoGoodbye or
// io.ErrUnexpectedEOF, or, after the goodbye, errEnded.
func (fr *frameReader) read(src func([]byte) (int, error), deliver func(transport.Header, []byte)) error {
	var n int
	var err error
	if fr.filling && len(fr.payload)-fr.got >= stageSize/2 && fr.r == fr.w {
		n, err = src(fr.payload[fr.got:])
		fr.got += max(n, 0)
	} else {
		if fr.r == fr.w {
			fr.r, fr.w = 0, 0
		}
		into := fr.stage[fr.w:]
		if fr.bulk && !fr.filling && fr.w == 0 {
			into = into[:HeaderSize]
		}
		n, err = src(into)
		fr.w += max(n, 0)
	}
	if perr := fr.decode(deliver); perr != nil {
		return perr
	}
	if err == io.EOF {
		switch {
		case fr.goodbye:
			return errEnded
		case fr.filling || fr.r < fr.w:
			return io.ErrUnexpectedEOF
		}
		return errNoGoodbye
	}
	return err
}

// errEnded is what frameReader.read returns for a stream that ended
// cleanly: the goodbye record, then the end.
var errEnded = errors.New("the stream ended with the goodbye record")

// decode delivers the frames complete in the staging buffer and moves
// the rest of a large payload's bytes into it.
func (fr *frameReader) decode(deliver func(transport.Header, []byte)) error {
	for {
		if fr.filling {
			k := copy(fr.payload[fr.got:], fr.stage[fr.r:fr.w])
			fr.r += k
			fr.got += k
			if fr.got < len(fr.payload) {
				return nil
			}
			p, placed := fr.payload, fr.placed
			fr.filling, fr.payload, fr.placed = false, nil, false
			if placed {
				fr.landed(fr.h, p)
			} else {
				deliver(fr.h, p)
			}
			continue
		}
		if fr.goodbye && fr.r < fr.w {
			return &HeaderError{"kind", "data after the goodbye record"}
		}
		if fr.w-fr.r < HeaderSize {
			if fr.r > 0 && fr.w == len(fr.stage) {
				fr.w = copy(fr.stage, fr.stage[fr.r:fr.w])
				fr.r = 0
			}
			return nil
		}
		hb := fr.stage[fr.r : fr.r+HeaderSize]
		switch {
		case isRecord(hb, heartbeatRecord):
			fr.r += HeaderSize
			deliver(transport.Header{Kind: frameHeartbeat}, nil)
			continue
		case isRecord(hb, expelRecord):
			return errGaveUp
		case isGoodbye(hb):
			fr.r += HeaderSize
			fr.goodbye = true
			continue
		}
		h, err := decodeHeader(hb)
		if err != nil {
			return err
		}
		fr.r += HeaderSize
		fr.filling, fr.h, fr.got = true, h, 0
		if fr.place != nil && transport.Lands(h.Kind) && h.Len >= transport.LandMin {
			fr.payload = fr.place(h)
			fr.placed = fr.payload != nil
		}
		if !fr.placed {
			fr.payload = transport.GetBuf(int(h.Len))
		}
		fr.bulk = h.Len >= stageSize/2
	}
}
