package shm

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/hiercomm/hiercomm/comm"
)

// A ring carries the frames of Send/Recv messages from one rank to
// another: a byte buffer with a tail (bytes ever written, the sender's
// word) and a head (bytes ever consumed, the receiver's). The sender
// publishes a frame whole, header and payload, with one store of the tail;
// the receiver consumes it whole and publishes the head. Frames are padded
// to frameAlign bytes and the ring is a multiple of it, so a header never
// wraps (a payload may).
//
// A message is a begin frame (tag, dtype, count and the first bytes), then
// data frames, until its bytes are all sent; a cancel frame ends it early
// (its Send's context ended after part of it was in the ring), so the
// receiver drops it instead of waiting for the rest.

const (
	frameHdr   = 32
	frameAlign = 32

	frameBegin  = 1
	frameData   = 2
	frameCancel = 3
)

// frame is a decoded frame header.
type frame struct {
	kind  uint32
	n     int // payload bytes
	tag   int64
	count int64
	dtype uint8
}

// ring is one direction between two ranks.
type ring struct {
	buf  []byte
	tail *uint64
	head *uint64
}

func (c *Comm) ringBetween(src, dst int) ring {
	l := &c.seg.l
	off, ctl := l.ring(src, dst), l.ringCtl(src, dst)
	return ring{
		buf:  c.seg.mem[off : off+l.ringBytes : off+l.ringBytes],
		tail: u64At(c.seg.mem, ctl),
		head: u64At(c.seg.mem, ctl+lineBytes),
	}
}

func padded(n int) int { return (n + frameAlign - 1) &^ (frameAlign - 1) }

// room is the largest payload a frame written now can carry (-1: not even
// a header fits).
func (r ring) room() int {
	free := len(r.buf) - int(atomic.LoadUint64(r.tail)-atomic.LoadUint64(r.head))
	return (free - frameHdr) &^ (frameAlign - 1)
}

// maxPayload is the most a frame carries, so that a message larger than
// the ring goes in pieces while the receiver drains the others.
func (r ring) maxPayload() int { return len(r.buf) / 2 }

// beginFrame is the header of the first frame of a message.
func beginFrame(tag int, dt comm.DType, count int) frame {
	return frame{kind: frameBegin, tag: int64(tag), count: int64(count), dtype: uint8(dt)}
}

// put writes one frame and publishes it; the caller has checked room.
func (r ring) put(f frame, payload []byte) {
	t := atomic.LoadUint64(r.tail)
	R := uint64(len(r.buf))
	pos := int(t % R)
	h := r.buf[pos : pos+frameHdr]
	binary.LittleEndian.PutUint32(h[0:], f.kind)
	binary.LittleEndian.PutUint32(h[4:], uint32(len(payload)))
	binary.LittleEndian.PutUint64(h[8:], uint64(f.tag))
	binary.LittleEndian.PutUint64(h[16:], uint64(f.count))
	h[24] = f.dtype
	pos = (pos + frameHdr) % len(r.buf)
	n := copy(r.buf[pos:], payload)
	copy(r.buf, payload[n:])
	atomic.StoreUint64(r.tail, t+uint64(frameHdr+padded(len(payload))))
}

// next returns the oldest unconsumed frame and its payload (in at most two
// pieces, when it wraps), or ok false when the ring is empty.
func (r ring) next() (f frame, p1, p2 []byte, ok bool) {
	h := atomic.LoadUint64(r.head)
	if atomic.LoadUint64(r.tail)-h < frameHdr {
		return frame{}, nil, nil, false
	}
	pos := int(h % uint64(len(r.buf)))
	b := r.buf[pos : pos+frameHdr]
	f = frame{kind: binary.LittleEndian.Uint32(b[0:]), n: int(binary.LittleEndian.Uint32(b[4:])),
		tag: int64(binary.LittleEndian.Uint64(b[8:])), count: int64(binary.LittleEndian.Uint64(b[16:])), dtype: b[24]}
	pos = (pos + frameHdr) % len(r.buf)
	end := min(len(r.buf), pos+f.n)
	p1 = r.buf[pos:end]
	p2 = r.buf[:f.n-len(p1)]
	return f, p1, p2, true
}

// consume releases the frame next returned.
func (r ring) consume(f frame) {
	atomic.AddUint64(r.head, uint64(frameHdr+padded(f.n)))
}
