package tier

import (
	"context"
	"sync"
	"unsafe"

	"github.com/hiercomm/hiercomm/comm"
)

// CheckCache remembers the last few calls that ValidateHost found good on
// one rank of a communicator, with their Signatures, so that a call made
// again with the same arguments (the loop of a training step, or of a
// benchmark) skips the checks and the Signature's making. ValidateHost's
// verdict and SignatureOf depend on nothing but the call's kind, op,
// scalar, root, peer and tag, each buffer's dtype, length and memory, the
// rank and the size, as long as the context carries no Phase and no
// comm.Batch and the call no counts (AllToAllV); other calls are checked
// in full every time. An entry keeps the memory's address, not the
// memory: it keeps no buffer alive, and a new buffer at a freed one's
// address, of the same length and dtype, gets the same verdict. Making a
// small call's op took a fifth of a small Broadcast's time, most of it in
// these checks (docs/shm.md). Safe for concurrent use: a caller that finds
// the cache busy checks in full. The zero CheckCache is empty and ready.
type CheckCache struct {
	mu   sync.Mutex
	keys [checkSlots]checkKey
	sigs [checkSlots]comm.Signature // keys[i]'s call's
	used int                        // keys filled, from 0
	next int                        // the key the next good call replaces, once all are used
}

// checkSlots is how many good calls a CheckCache keeps: a step's few
// kinds of call (a gradient AllReduce, a metric's, a Broadcast), each
// with its own buffers.
const checkSlots = 4

// checkKey is what ValidateHost reads of a call, on a rank of a
// communicator of a fixed size.
type checkKey struct {
	kind            comm.Kind
	op              comm.ReduceOp
	scalar          float64
	root, peer, tag int
	send, recv      bufKey
}

// bufKey is what the checks read of a buffer: dtype and length, and where
// its memory is and how much of it (host memory) or its device pointer.
// The device ordinal is not kept: a call with device memory is never good
// here (RequireHost), so no key of one is ever kept.
type bufKey struct {
	dt    comm.DType
	n     int
	host  bool
	addr  uintptr // the first byte of host memory, or the device pointer
	bytes int     // the host memory's length
}

func keyOfBuffer(b comm.Buffer) bufKey {
	h := b.Bytes()
	if h == nil {
		return bufKey{dt: b.DType(), n: b.Len(), addr: b.Ptr()}
	}
	return bufKey{dt: b.DType(), n: b.Len(), host: true, addr: uintptr(unsafe.Pointer(unsafe.SliceData(h))), bytes: len(h)}
}

// Check is SignatureOf(ctx, c) and ValidateHost(ctx, c, rank, size), from
// the cache when c was found good before.
func (cc *CheckCache) Check(ctx context.Context, c comm.Call, rank, size int) (comm.Signature, error) {
	if _, set := phaseIn(ctx); set || len(c.SendCounts) > 0 || len(c.RecvCounts) > 0 ||
		ctx != nil && c.Kind.Collective() && comm.BatchOf(ctx) != 0 {
		return SignatureOf(ctx, c), ValidateHost(ctx, c, rank, size)
	}
	k := checkKey{kind: c.Kind, op: c.Op, scalar: c.Scalar, root: c.Root, peer: c.Peer, tag: c.Tag,
		send: keyOfBuffer(c.Send), recv: keyOfBuffer(c.Recv)}
	if cc.mu.TryLock() {
		for i := range cc.used {
			if cc.keys[i] == k {
				sig := cc.sigs[i]
				cc.mu.Unlock()
				return sig, nil
			}
		}
		cc.mu.Unlock()
	}
	sig, err := c.Signature(), ValidateHost(ctx, c, rank, size)
	if err == nil && cc.mu.TryLock() {
		i := cc.used
		if i < checkSlots {
			cc.used++
		} else {
			i, cc.next = cc.next, (cc.next+1)%checkSlots
		}
		cc.keys[i], cc.sigs[i] = k, sig
		cc.mu.Unlock()
	}
	return sig, err
}
