package nexar

import (
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/nexar/transport"
)

// Receives that land in the caller's memory: the runtime's side of
// transport.Placer.
//
// A receive that takes a frame's payload whole into the caller's receive
// buffer — a collective's Copy step into it (the pieces of a Broadcast, an
// AllGather, the all-gather half of an AllReduce), a blocking Recv's
// pieces, a posted Recv's buffer (posted.go) — posts that memory as the
// frame's landing while it waits (Comm.await, Comm.postRecv). A transport
// that can read a payload where it is told (plain TCP's pump,
// nexar/transport/netmesh/pump.go), on decoding the header of a large data
// frame, asks the world whether a receive waits for it there (Place); if
// one does, it reads the payload straight into that memory rather than
// into a pooled buffer the receive would then copy, and hands the frame
// over by Landed instead of Deliver. The kernel's copy out of the socket
// is then the only copy of those bytes on the receiving side.
//
// The caller's memory must never be written once the caller has it back.
// A landing is claimed by one reader (landing.by, a transport.Diverter)
// when its header comes, and is used up when the frame is complete
// (Landed). A receive that gives up before then (its deadline, an abort,
// a failure: Comm.leaveLocked, posted.fail) takes the landing back from
// the reader that claimed it (Divert): once Divert returns, the reader
// writes no more into it, the rest of the frame goes into a pooled
// buffer, and the frame goes the ordinary way (Deliver) and is dropped or
// kept as any late frame is. A frame that lands is never given to the
// buffer pools (transport.PutBuf): it goes from the reader to its waiting
// receive only, and the schedule's copy finds source and destination the
// same memory (runner.combine).
//
// Frames smaller than landMin come through the pump's staging buffer in
// any case (several to a read), and the transports that read with
// blocking reads (QUIC, the TLS lane) cannot give memory back mid-read:
// their receives copy as before.

// landMin is the least payload that lands in a receive's memory
// (transport.LandMin): a smaller one shares the pump's staging reads with
// its neighbours.
const landMin = transport.LandMin

// landing is the caller's memory a waiting receive offers the frame it
// waits for (Comm.landings).
type landing struct {
	buf []byte
	sig comm.Signature     // the call's: a frame of another call does not land (tier.SigMatch)
	by  transport.Diverter // the pump filling buf, once its header came; nil until then
}

// keyOf is the key that a receive of frame h from src (a rank of the
// communicator) waits under.
func keyOf(src int, h transport.Header) mkey {
	k := mkey{kind: h.Kind, seq: h.Seq, step: h.Step, src: int32(src)}
	if h.Kind == transport.FrameP2P {
		k.tag = h.Sig.Root
	}
	return k
}

// offer is the landing a receive into buf, of the call sig, offers its
// frame: nil where none can land (buf shorter than landMin, or a
// transport without pumps, whose receives always copy).
func (c *Comm) offer(buf []byte, sig comm.Signature) *landing {
	if len(buf) < landMin || c.w.pl == nil {
		return nil
	}
	return &landing{buf: buf, sig: sig}
}

// sameMemory reports whether a and b start at the same byte: a payload
// that landed in the memory b is.
func sameMemory(a, b []byte) bool { return len(a) > 0 && len(b) > 0 && &a[0] == &b[0] }

// Place implements transport.Placer.
func (w *world) Place(src int, h transport.Header, by transport.Diverter) []byte {
	w.mu.Lock()
	c := w.comms[h.Comm]
	w.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.place(src, h, by)
}

// Landed implements transport.Placer.
func (w *world) Landed(src int, h transport.Header, payload []byte) {
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
func (c *Comm) place(wsrc int, h transport.Header, by transport.Diverter) []byte {
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
func (c *Comm) landed(wsrc int, h transport.Header, payload []byte) {
	src := c.commRank(wsrc)
	if src < 0 {
		return
	}
	k := keyOf(src, h)
	c.mu.Lock()
	c.countLocked(src)
	keep, eff := true, tier.Effects{}
	if h.Kind == transport.FrameData {
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
// landing that a pump is filling is first taken back from it (Divert),
// without c.mu, which a pump delivering takes. It reports whether the
// receive left; false: its frame is in ch. c.mu is held on return.
func (c *Comm) leaveLocked(k mkey, ch chan frame) bool {
	if l := c.landings[k]; l != nil && l.by != nil {
		c.mu.Unlock()
		l.by.Divert(l.buf)
		c.mu.Lock()
		if c.waiters[k] != ch {
			return false
		}
	}
	delete(c.waiters, k)
	delete(c.landings, k)
	return true
}
