package nccl

import (
	"context"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// Staged is a comm.Communicator that lets a host communicator (nexar
// between nodes) move device buffers: each device buffer of a call is
// copied to page-locked host memory, the host communicator runs the call
// there, and the result is copied back. Host buffers pass straight
// through.
//
// Calls pass two ordered stages: the first copies a call's inputs off the
// device and starts it on the host communicator, the second waits for it
// and copies the result back. So while the network carries call k, the
// copies of call k+1 (device → host) and of call k-1 (host → device) run:
// a caller that cuts a large message into chunks (the hierarchy's
// pipelines do) keeps copies and network busy together, double-buffered
// at least. A large AllReduce, Broadcast, Reduce, ReduceScatter or
// AllGather is cut into pieces of StageChunkBytes for the same reason (a
// flat world of single-GPU nodes); other calls are staged whole.
//
// It is how the hierarchy's rails and its flat world carry device data,
// and how a flat world of one GPU per node does (see docs/gpu.md).
type Staged struct {
	tier.Blocking
	inner      comm.Communicator
	dev        *Device
	pieceBytes int

	exec *tier.Exec[[]*staging] // runs the first stage of each call, in order
	out  chan *staging
	done chan struct{}
}

// staging is one call on its way through the stages.
type staging struct {
	ctx  context.Context
	call comm.Call // the caller's
	verr error     // this rank's own argument error
	// done, on a call's last piece, completes the call with its pieces'
	// first error (first).
	done  func(error)
	first *error

	// blocks, for a piece of a ReduceScatter or an AllGather:
	// elements [blocks[0], blocks[0]+blocks[1]) of every rank's block,
	// call being the whole call; zero for any other staging (a piece has
	// an element at least: pieces).
	blocks [2]int

	host      comm.Call // the call as the host communicator runs it
	sub       *comm.Work
	pins      []pinnedBuf
	recvPin   pinnedBuf // where the result lands, when recv is device memory
	copyBack  bool
	localFail error // a copy that failed before the host call
}

// NewStaged returns inner, able to move device memory of dev. The Staged
// owns inner: Close closes it.
func NewStaged(inner comm.Communicator, dev *Device) *Staged {
	s := &Staged{inner: inner, dev: dev, pieceBytes: StageChunkBytes, out: make(chan *staging, 4096), done: make(chan struct{})}
	s.Blocking = tier.Blocking{S: s}
	s.exec = tier.NewExec(tier.ExecConfig[[]*staging]{
		Run: s.stageIn,
		Refuse: func(t *tier.Task[[]*staging], err error) error {
			return &comm.OpError{Rank: s.Rank(), Peer: -1, Kind: t.Call.Kind, Err: err}
		},
	})
	go s.stageOut()
	return s
}

// Inner is the host communicator underneath.
func (s *Staged) Inner() comm.Communicator { return s.inner }

// Rank implements comm.Communicator.
func (s *Staged) Rank() int { return s.inner.Rank() }

// Size implements comm.Communicator.
func (s *Staged) Size() int { return s.inner.Size() }

func (s *Staged) String() string {
	return fmt.Sprintf("%v, staged through host memory from %v", s.inner, s.dev)
}

// Start implements comm.Communicator.
func (s *Staged) Start(ctx context.Context, call comm.Call) *comm.Work {
	return s.exec.Start(ctx, call, nil, s.stagings(ctx, call))
}

// Run implements tier.Runner: the first stage runs on the calling
// goroutine when nothing is queued.
func (s *Staged) Run(ctx context.Context, call comm.Call) error {
	return s.exec.Do(ctx, call, nil, s.stagings(ctx, call))
}

// stagings are the pieces call is staged as.
func (s *Staged) stagings(ctx context.Context, call comm.Call) []*staging {
	verr := tier.Validate(ctx, call, s.Rank(), s.Size())
	if verr == nil {
		verr = s.dev.checkCall(call, "the staging", true)
	}
	if pieces := s.pieces(call); verr == nil && len(pieces) > 1 {
		if ph := tier.PhaseOf(ctx); ph.Outer == (comm.Outer{}) {
			// Every piece carries the whole call's signature, which the
			// host communicator compares with its peers': ranks that
			// disagree on the count get a mismatch at the first piece,
			// even a rank whose smaller call is not cut and whose count
			// happens to be a peer's first piece's.
			ph.Outer = tier.OuterAt(tier.SignatureOf(ctx, call), 0)
			ctx = tier.WithPhase(ctx, ph)
		}
		if call.Kind == comm.KindReduce && call.Root != s.Rank() {
			call.Recv = comm.Buffer{} // ignored here, and of any length
		}
		ts := make([]*staging, 0, len(pieces))
		for _, p := range pieces {
			if call.Kind == comm.KindReduceScatter || call.Kind == comm.KindAllGather { // a part of every block
				ts = append(ts, &staging{ctx: ctx, call: call, blocks: p})
			} else {
				ts = append(ts, &staging{ctx: ctx, call: sliceCall(call, p[0], p[1])})
			}
		}
		return ts
	}
	return []*staging{{ctx: ctx, call: call, verr: verr}}
}

// StageChunkBytes is the default piece size of a large AllReduce,
// Broadcast, Reduce, ReduceScatter or AllGather of device memory: pieces
// are staged one after another, so the copies of one overlap the network
// of the next. A ReduceScatter's or AllGather's piece is the same part of
// every rank's block, and its size counts one block.
const StageChunkBytes = 4 << 20

// SetPieceBytes sets the piece size (StageChunkBytes if n ≤ 0; every rank
// must use the same). Call it before the first Start.
func (s *Staged) SetPieceBytes(n int) {
	if n <= 0 {
		n = StageChunkBytes
	}
	s.pieceBytes = n
}

// pieces cuts a call of device memory larger than two pieces' bytes (of
// one block, for a ReduceScatter or an AllGather) into pieces, as
// [offset, count] pairs of elements; otherwise it returns nil (one call).
// Piece 0 holds as many elements as there are pieces, and the rest are
// split evenly (at least one element each). Whether a call is cut depends
// on where this rank's buffers are: every rank must pass the same kind of
// memory, as they must pass the same count (stagings makes a
// disagreement a mismatch at the first piece).
func (s *Staged) pieces(call comm.Call) [][2]int {
	n, es := call.Send.Len(), call.Send.DType().Size()
	switch call.Kind {
	case comm.KindAllReduce, comm.KindBroadcast, comm.KindReduce:
		if !device(call.Send) && !device(call.Recv) {
			return nil
		}
	case comm.KindReduceScatter: // pieces of the blocks: the side with them on the device
		if !device(call.Send) {
			return nil
		}
		n = call.Recv.Len()
	case comm.KindAllGather:
		if !device(call.Recv) {
			return nil
		}
	default:
		return nil
	}
	per := max(2, s.pieceBytes/max(1, es)) // so that every piece has an element
	if n <= 2*per {
		return nil
	}
	m := (n + per - 1) / per // pieces, ≥ 3
	out := [][2]int{{0, m}}
	rest, at := n-m, m
	for i := range m - 1 {
		k := rest / (m - 1)
		if i < rest%(m-1) {
			k++
		}
		out = append(out, [2]int{at, k})
		at += k
	}
	return out
}

// sliceCall is elements [off, off+n) of an elementwise call.
func sliceCall(c comm.Call, off, n int) comm.Call {
	part := func(b comm.Buffer) comm.Buffer {
		if b.IsZero() {
			return b
		}
		return b.Slice(off, n)
	}
	c.Send, c.Recv = part(c.Send), part(c.Recv)
	return c
}

// blockPiece reports whether t is a piece of a ReduceScatter or an
// AllGather (blocks is set).
func (t *staging) blockPiece() bool { return t.blocks[1] > 0 }

// pin takes n elements of dt of page-locked memory for t (freed when t
// is done) and returns them as a host buffer too.
func (t *staging) pin(dev *Device, dt comm.DType, n int) (comm.Buffer, pinnedBuf, error) {
	p, err := dev.allocHost(n * dt.Size())
	if err != nil {
		return comm.Buffer{}, p, err
	}
	t.pins = append(t.pins, p)
	hb, err := comm.HostBytes(dt, p.bytes)
	return hb, p, err
}

// device reports whether b is device memory with elements.
func device(b comm.Buffer) bool { return !b.IsZero() && !b.OnHost() }

// stageIn, on the executor (one call at a time, in order), copies each
// piece's device inputs to host memory, starts it on the host
// communicator and hands it to the second stage, which completes the call.
func (s *Staged) stageIn(t *tier.Task[[]*staging]) error {
	first := new(error)
	t.X[len(t.X)-1].done = t.Detach()
	for _, p := range t.X {
		s.prepare(p)
		p.sub = s.inner.Start(p.ctx, p.host)
		p.first = first
		s.out <- p
	}
	return nil
}

// prepare builds t.host. A rejected call (or one whose copy failed) runs
// on the host communicator without buffers, so that the host
// communicator rejects it too and tells the peers.
func (s *Staged) prepare(t *staging) {
	c := t.call
	if t.verr != nil {
		t.host = tier.WithoutBuffers(c)
		return
	}
	if t.blockPiece() {
		s.prepareBlocks(t)
		return
	}
	useSend, useRecv := tier.Uses(c, s.Rank())
	if !device(c.Send) && !device(c.Recv) {
		t.host = c
		return
	}
	h := c
	pin := func(b comm.Buffer, read bool) (comm.Buffer, pinnedBuf, error) {
		hb, p, err := t.pin(s.dev, b.DType(), b.Len())
		if err == nil && read {
			err = s.dev.toHost(p, b)
		}
		return hb, p, err
	}
	var err error
	inPlace := comm.SameMemory(c.Send, c.Recv)
	if device(c.Send) {
		if useSend {
			// Broadcast reads its buffer on the root only.
			read := c.Kind != comm.KindBroadcast || c.Root == s.Rank()
			var p pinnedBuf
			h.Send, p, err = pin(c.Send, read)
			if inPlace {
				h.Recv, t.recvPin = h.Send, p
			}
		} else {
			h.Send = comm.Buffer{}
		}
	}
	if err == nil && device(c.Recv) && !inPlace {
		if useRecv {
			h.Recv, t.recvPin, err = pin(c.Recv, false)
		} else {
			h.Recv = comm.Buffer{}
		}
	}
	if err != nil {
		t.localFail = err
		t.host = tier.WithoutBuffers(c)
		return
	}
	if device(c.Recv) && !useRecv {
		h.Recv = comm.Buffer{}
	}
	t.copyBack = device(c.Recv) && useRecv
	t.host = h
}

// prepareBlocks builds t.host for a piece of a ReduceScatter (whose
// send is device memory) or an AllGather (whose recv is): the piece's part
// of each block is gathered into one page-locked buffer, or scattered back
// from one. The in-place forms are safe to cut so: a piece writes only its
// own part of each block, which no other piece reads.
func (s *Staged) prepareBlocks(t *staging) {
	c, off, k := t.call, t.blocks[0], t.blocks[1]
	p := s.Size()
	dt := c.Send.DType()
	pin := func(n int) (comm.Buffer, pinnedBuf, error) { return t.pin(s.dev, dt, n) }
	h := c
	var in pinnedBuf
	var err error
	switch c.Kind {
	case comm.KindReduceScatter:
		if h.Send, in, err = pin(p * k); err == nil {
			err = s.dev.toHostBlocks(in, c.Send, off, k, c.Recv.Len(), p)
		}
		switch {
		case err != nil:
		case device(c.Recv):
			h.Recv, t.recvPin, err = pin(k)
			t.copyBack = true
		default:
			h.Recv = c.Recv.Slice(off, k)
		}
	case comm.KindAllGather:
		h.Send = c.Send.Slice(off, k)
		if device(c.Send) {
			if h.Send, in, err = pin(k); err == nil {
				err = s.dev.toHost(in, c.Send.Slice(off, k))
			}
		}
		if err == nil {
			h.Recv, t.recvPin, err = pin(p * k)
			t.copyBack = true
		}
	}
	if err != nil {
		t.localFail = err
		t.copyBack = false
		t.host = tier.WithoutBuffers(c)
		return
	}
	t.host = h
}

// writeBack copies t's result from page-locked memory to the device.
func (s *Staged) writeBack(t *staging) error {
	c := t.call
	off, k := t.blocks[0], t.blocks[1]
	switch {
	case !t.blockPiece():
		return s.dev.toDevice(c.Recv, t.recvPin)
	case c.Kind == comm.KindReduceScatter:
		return s.dev.toDevice(c.Recv.Slice(off, k), t.recvPin)
	default: // AllGather
		return s.dev.toDeviceBlocks(c.Recv, t.recvPin, off, k, c.Send.Len(), s.Size())
	}
}

// stageOut waits for each call and copies its result to the device, in
// order.
func (s *Staged) stageOut() {
	defer close(s.done)
	for t := range s.out {
		err := t.sub.Wait()
		switch {
		case t.verr != nil:
			err = &comm.OpError{Rank: s.Rank(), Peer: -1, Kind: t.call.Kind, Err: t.verr}
		case t.localFail != nil:
			err = &comm.OpError{Rank: s.Rank(), Peer: -1, Kind: t.call.Kind, Err: fmt.Errorf("staging through host memory: %w", t.localFail)}
		case err == nil && t.copyBack:
			if cerr := s.writeBack(t); cerr != nil {
				err = &comm.OpError{Rank: s.Rank(), Peer: -1, Kind: t.call.Kind, Err: fmt.Errorf("copying the result to the device: %w", cerr)}
			}
		}
		for _, p := range t.pins {
			s.dev.freeHost(p)
		}
		if err != nil && *t.first == nil {
			*t.first = err
		}
		if t.done != nil {
			t.done(*t.first)
		}
	}
}

// Split implements comm.Communicator: the host communicator's child,
// staged through the same device.
func (s *Staged) Split(ctx context.Context, color, key int) (comm.Communicator, error) {
	if err := s.Barrier(ctx); err != nil { // calls started before the split are out of the stages
		return nil, err
	}
	c, err := s.inner.Split(ctx, color, key)
	if err != nil || c == nil {
		return nil, err
	}
	return NewStaged(c, s.dev), nil
}

// Abort implements comm.Control: the host communicator is aborted, which
// tells every peer.
func (s *Staged) Abort(cause error) { s.inner.Abort(cause) }

// Aborted implements comm.Control: the host communicator's signal, which
// every failure of a staged call aborts.
func (s *Staged) Aborted() <-chan struct{} { return s.inner.Aborted() }

// AbortCause implements comm.Control: the host communicator's.
func (s *Staged) AbortCause() error { return s.inner.AbortCause() }

// PeerFailed implements comm.Control: an outside failure detector's news
// goes to the host communicator.
func (s *Staged) PeerFailed(peer int, cause error) { s.inner.PeerFailed(peer, cause) }

// SetProgress implements comm.Control with the host communicator's census.
func (s *Staged) SetProgress(f func() comm.Progress) (remove func(), ok bool) {
	return s.inner.SetProgress(f)
}

// Progress implements comm.Control with the host communicator's census.
func (s *Staged) Progress(ctx context.Context) (answers []comm.Progress, answered []bool) {
	return s.inner.Progress(ctx)
}

// Announce implements comm.Control with the host communicator's census.
func (s *Staged) Announce(p comm.Progress) { s.inner.Announce(p) }

// Close implements comm.Communicator: the host communicator is closed
// (its calls in flight fail with comm.ErrClosed) and the stages end.
func (s *Staged) Close() error {
	if !s.exec.Close() {
		return nil
	}
	err := s.inner.Close()
	s.exec.Wait() // the first stage in progress, if any, hands its pieces on
	close(s.out)
	<-s.done
	return err
}
