package tier

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/hiercomm/hiercomm/comm"
)

// checkCalls is a set of calls, good and bad, that share buffers: the
// same memory in place and out of place, overlapping, the right and the
// wrong lengths, another dtype over the same bytes, a device buffer, and
// every kind's own rules (a root, a peer and a tag, counts).
func checkCalls(t *testing.T) []comm.Call {
	t.Helper()
	a, b := make([]float32, 64), make([]float32, 64)
	big := make([]float32, 4*16)
	raw, err := comm.HostBytes(comm.U8, make([]byte, 256))
	if err != nil {
		t.Fatal(err)
	}
	dev := comm.Device(0x1000, 64, comm.F32, 0)
	ar := func(s, r comm.Buffer, op comm.ReduceOp) comm.Call {
		return comm.Call{Kind: comm.KindAllReduce, Send: s, Recv: r, Op: op}
	}
	return []comm.Call{
		ar(comm.Host(a), comm.Host(b), comm.Sum),                                                                                                 // good
		ar(comm.Host(a), comm.Host(a), comm.Sum),                                                                                                 // good: in place
		ar(comm.Host(a[:32]), comm.Host(a[16:48]), comm.Sum),                                                                                     // overlapping
		ar(comm.Host(a), comm.Host(b[:63]), comm.Sum),                                                                                            // wrong length
		ar(comm.Host(a), comm.Host(b), comm.ReduceOp(99)),                                                                                        // bad op
		ar(comm.Host(a), comm.Host(b), comm.PreMulSum),                                                                                           // no factor
		{Kind: comm.KindAllReduce, Send: comm.Host(a), Recv: comm.Host(b), Op: comm.PreMulSum, Scalar: 0.5},                                      // good
		ar(dev, dev, comm.Sum),                                                                                                                   // device memory
		{Kind: comm.KindBroadcast, Send: comm.Host(a), Recv: comm.Host(a), Root: 1},                                                              // good
		{Kind: comm.KindBroadcast, Send: comm.Host(a), Recv: comm.Host(a), Root: 4},                                                              // root out of range
		{Kind: comm.KindBroadcast, Send: comm.Host(a), Recv: comm.Host(b), Root: 1},                                                              // not in place
		{Kind: comm.KindBroadcast, Send: raw, Recv: raw, Root: 0},                                                                                // good, u8
		{Kind: comm.KindAllGather, Send: comm.Host(a[:16]), Recv: comm.Host(big)},                                                                // good
		{Kind: comm.KindAllGather, Send: comm.Host(big[16:32]), Recv: comm.Host(big)},                                                            // good: in place on rank 1
		{Kind: comm.KindAllGather, Send: comm.Host(big[0:16]), Recv: comm.Host(big)},                                                             // overlapping on rank 1
		{Kind: comm.KindSend, Send: comm.Host(a), Peer: 2, Tag: 7},                                                                               // good
		{Kind: comm.KindSend, Send: comm.Host(a), Peer: 2, Tag: -1},                                                                              // negative tag
		{Kind: comm.KindRecv, Recv: comm.Host(b), Peer: 5},                                                                                       // peer out of range
		{Kind: comm.KindAllToAllV, Send: comm.Host(a), Recv: comm.Host(b), SendCounts: []int{16, 16, 16, 16}, RecvCounts: []int{16, 16, 16, 16}}, // good, never kept
		{Kind: comm.KindAllToAllV, Send: comm.Host(a), Recv: comm.Host(b), SendCounts: []int{16, 16, 16, 17}, RecvCounts: []int{16, 16, 16, 16}}, // bad counts
		{Kind: comm.KindBarrier}, // good
	}
}

// TestCheckCacheAgrees: through the cache, every call of a mixed stream
// (more good calls than the cache holds, bad ones between them, in random
// order) gets ValidateHost's own verdict, also from concurrent callers.
func TestCheckCacheAgrees(t *testing.T) {
	const rank, size = 1, 4
	calls := checkCalls(t)
	ctx := context.Background()
	want := make([]error, len(calls))
	good := 0
	for i, c := range calls {
		want[i] = ValidateHost(ctx, c, rank, size)
		if want[i] == nil {
			good++
		}
	}
	if good <= checkSlots || good == len(calls) {
		t.Fatalf("%d of %d calls are good: the stream must hold more good calls than the cache's %d, and bad ones", good, len(calls), checkSlots)
	}
	var cc CheckCache
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 5000 {
				i := rng.IntN(len(calls))
				sig, got := cc.Check(ctx, calls[i], rank, size)
				if (got == nil) != (want[i] == nil) || (got != nil && got.Error() != want[i].Error()) {
					t.Errorf("call %d (%v): the cache says %v, ValidateHost %v", i, calls[i].Signature(), got, want[i])
					return
				}
				if sig != calls[i].Signature() {
					t.Errorf("call %d: the cache's Signature %v, want %v", i, sig, calls[i].Signature())
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestCheckCacheRefusedPhase: a call that a composed communicator
// refuses (Phase.Refused) is refused through the cache too, even when the
// same call was found good before; a phase's Signature has its Outer.
func TestCheckCacheRefusedPhase(t *testing.T) {
	a := make([]float32, 4)
	c := comm.Call{Kind: comm.KindAllReduce, Send: comm.Host(a), Recv: comm.Host(a), Op: comm.Sum}
	var cc CheckCache
	if _, err := cc.Check(context.Background(), c, 0, 2); err != nil {
		t.Fatal(err)
	}
	why := fmt.Errorf("rank 1 passed a bad count")
	ctx := WithPhase(context.Background(), Phase{Refused: why})
	if _, err := cc.Check(ctx, c, 0, 2); !errors.Is(err, comm.ErrInvalidArgument) || !errors.Is(err, why) {
		t.Errorf("a refused phase of a call found good before: %v; want the refusal", err)
	}
	// A phase's Outer, and a comm.Batch's fingerprint, are in the
	// Signature the cache gives.
	outer := comm.Outer{Kind: comm.KindAllReduce, Hash: 42}
	if sig, err := cc.Check(WithPhase(context.Background(), Phase{Outer: outer}), c, 0, 2); err != nil || sig.Outer != outer {
		t.Errorf("a phase of a call found good before: Signature %v, %v; want Outer %v", sig, err, outer)
	}
}

// BenchmarkCheckCache: a good call's checks (and Signature) in full and
// from the cache.
func BenchmarkCheckCache(b *testing.B) {
	a := make([]float32, 2)
	c := comm.Call{Kind: comm.KindAllReduce, Send: comm.Host(a), Recv: comm.Host(a), Op: comm.Sum}
	ctx := context.Background()
	b.Run("ValidateHost", func(b *testing.B) {
		for range b.N {
			if SignatureOf(ctx, c).Kind == 0 || ValidateHost(ctx, c, 0, 4) != nil {
				b.Fatal("refused")
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		var cc CheckCache
		for range b.N {
			if _, err := cc.Check(ctx, c, 0, 4); err != nil {
				b.Fatal(err)
			}
		}
	})
}
