package nexar

import (
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// Receives that land in the caller's memory.
//
// A receive that takes a frame's payload whole into the caller's receive
// buffer — a collective's Copy step into it (the pieces of a Broadcast, an
// AllGather, the all-gather half of an AllReduce), a blocking Recv's
// pieces, a posted Recv's buffer (posted.go) — posts that memory as the
// frame's landing while it waits (Comm.await, Comm.postRecv). The plain TCP
// transport's pump (pump.go), on decoding the header of a large data
// frame, asks whether a receive waits for it there (place); if one does,
// it reads the payload straight into that memory rather than into a pooled
// buffer the receive would then copy, and hands the frame over by landed
// instead of Deliver. The kernel's copy out of the socket is then the only
// copy of those bytes on the receiving side.
//
// The caller's memory must never be written once the caller has it back.
// A landing is claimed by one pump (landing.by) when its header comes, and
// is used up when the frame is complete (landed). A receive that gives up
// before then (its deadline, an abort, a failure: Comm.leaveLocked,
// posted.fail) takes the landing back under the claiming pump's lock
// (pump.divert): a pump writes only while
// it holds that lock, and divert moves the rest of the frame into a pooled
// buffer, after which the frame goes the ordinary way (Deliver) and is
// dropped or kept as any late frame is. A frame that lands is never given
// to the buffer pools (putBuf): it goes from the pump to its waiting
// receive only, and the schedule's copy finds source and destination the
// same memory (runner.combine).
//
// Frames smaller than landMin come through the pump's staging buffer in
// any case (several to a read), and the transports that read with
// blocking reads (QUIC, the TLS lane) cannot give memory back mid-read:
// their receives copy as before.

// landMin is the least payload that lands in a receive's memory: a
// smaller one shares the pump's staging reads with its neighbours.
const landMin = stageSize / 2

// landing is the caller's memory a waiting receive offers the frame it
// waits for (Comm.landings).
type landing struct {
	buf []byte
	sig comm.Signature // the call's: a frame of another call does not land (tier.SigMatch)
	by  *pump          // the pump filling buf, once its header came; nil until then
}

// placer is a Handler whose receives can offer their memory to the frames
// they wait for: place names it for a frame whose header has come from
// src (nil: none, the payload goes to a pooled buffer), claimed by the
// pump by; landed takes such a frame once its payload is in that memory,
// in place of Deliver.
type placer interface {
	place(src int, h Header, by *pump) []byte
	landed(src int, h Header, payload []byte)
}

// lands reports whether frames of kind k may land in a receive's memory:
// a collective's data and a Recv's pieces.
func lands(k FrameKind) bool { return k == FrameData || k == FrameP2P }

// keyOf is the key that a receive of frame h from src (a rank of the
// communicator) waits under.
func keyOf(src int, h Header) mkey {
	k := mkey{kind: h.Kind, seq: h.Seq, step: h.Step, src: int32(src)}
	if h.Kind == FrameP2P {
		k.tag = h.Sig.Root
	}
	return k
}

// sameMemory reports whether a and b start at the same byte: a payload
// that landed in the memory b is.
func sameMemory(a, b []byte) bool { return len(a) > 0 && len(b) > 0 && &a[0] == &b[0] }

// place implements placer.
func (w *world) place(src int, h Header, by *pump) []byte {
	if !lands(h.Kind) {
		return nil
	}
	w.mu.Lock()
	c := w.comms[h.Comm]
	w.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.place(src, h, by)
}

// landed implements placer.
func (w *world) landed(src int, h Header, payload []byte) {
	w.mu.Lock()
	c := w.comms[h.Comm]
	w.mu.Unlock()
	if c != nil {
		c.landed(src, h, payload)
	}
	// else: the communicator is gone; its receive took the landing back
	// before it returned (Comm.leave), so this cannot be; and the memory is
	// the caller's, never the pool's.
}

// place is the landing of the frame h from world rank wsrc, if its
// receive waits and offered one of its length and call; by claims it.
func (c *Comm) place(wsrc int, h Header, by *pump) []byte {
	src := c.commRank(wsrc)
	if src < 0 {
		return nil
	}
	k := keyOf(src, h)
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.landings[k]
	if l == nil || l.by != nil || len(l.buf) != int(h.Len) || !tier.SigMatch(l.sig, h.Sig) {
		return nil
	}
	l.by = by
	return l.buf
}

// landed is deliver for a frame whose payload is in its receive's memory:
// it goes to that receive (waiting, or posted: posted.go), or nowhere.
func (c *Comm) landed(wsrc int, h Header, payload []byte) {
	src := c.commRank(wsrc)
	if src < 0 {
		return
	}
	k := keyOf(src, h)
	c.mu.Lock()
	c.countLocked(src)
	keep, eff := true, tier.Effects{}
	if h.Kind == FrameData {
		keep, eff = c.failure.Frame(src, h.Seq, h.Sig)
	}
	f := frame{src: src, h: h, payload: payload}
	var posted *posted
	if l := c.landings[k]; keep && l != nil && sameMemory(l.buf, payload) {
		if ch, ok := c.waiters[k]; ok {
			delete(c.waiters, k)
			delete(c.landings, k)
			ch <- f
		} else {
			posted = c.takePostedLocked(k) // a Recv started with Start
		}
	}
	delete(c.landings, k)
	post := c.applyLocked(eff)
	c.mu.Unlock()
	post()
	if posted != nil {
		c.fill(posted, f)
	}
}

// leaveLocked ends the wait of the receive ch for k, which is still
// registered (c.waiters[k] == ch), unless its frame comes meanwhile: a
// landing that a pump is filling is first taken back from it (divert),
// without c.mu, which a pump delivering takes. It reports whether the
// receive left; false: its frame is in ch. c.mu is held on return.
func (c *Comm) leaveLocked(k mkey, ch chan frame) bool {
	if l := c.landings[k]; l != nil && l.by != nil {
		c.mu.Unlock()
		l.by.divert(l.buf)
		c.mu.Lock()
		if c.waiters[k] != ch {
			return false
		}
	}
	delete(c.waiters, k)
	delete(c.landings, k)
	return true
}
