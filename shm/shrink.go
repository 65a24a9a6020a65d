package shm

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"sync/atomic"

	"github.com/hiercomm/hiercomm/comm"
)

// Shrink implements comm.Communicator for the ranks of one host. A rank has
// failed when its process is gone, when it closed the communicator, or
// when the failure that aborted this one blames it (a hung rank, seen by
// its heartbeat): what every rank of the host reads alike, in the segment
// and the process table, with no message to agree over. The survivors
// meet in fresh shared memory, named for this communicator, this Shrink
// and the survivors, as ranks in their order here. Ranks that saw
// different failures (one looked before a process had gone) meet in
// different segments, and their Shrink fails within ConnectTimeout
// instead of giving them different communicators: call it again, once
// the failure is plain to all. With no rank failed, every rank gets a
// copy of the whole group.
//
// Call it when no collective of c is in flight; c stays as it is (aborted
// by the failure): Close it after Shrink.
func (c *Comm) Shrink(ctx context.Context) (comm.Communicator, error) {
	attempt := c.shrinks.Add(1)
	fail := func(err error) (comm.Communicator, error) {
		return nil, &comm.OpError{Rank: c.rank, Peer: -1, Kind: comm.KindShrink, Seq: attempt, Comm: c.name, Err: err}
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed || c.closing.Load() {
		return fail(comm.ErrClosed)
	}
	blamed := -1
	if b, ok := comm.CulpritOf(c.AbortCause()); ok && !b.Outside {
		blamed = b.Rank
	}
	if blamed == c.rank {
		return fail(fmt.Errorf("the failure that aborted the communicator is this rank's, so it is in no shrunk communicator: %w", c.AbortCause()))
	}
	var survivors []int
	for q := range c.size {
		if q == c.rank || q != blamed && c.present(q) {
			survivors = append(survivors, q)
		}
	}
	cfg := c.cfg
	cfg.Namespace, cfg.Rank, cfg.Size = c.shrunkNamespace(attempt, survivors), len(survivors)-1, len(survivors)
	cfg.Name, cfg.Ranks = c.name, c.jobRanks(survivors)
	for i, q := range survivors {
		if q == c.rank {
			cfg.Rank = i
		}
	}
	s, err := New(ctx, cfg)
	if err != nil {
		return fail(fmt.Errorf("the survivors by this rank's view, ranks %v, did not all meet in fresh shared memory (did they see the same failures? call Shrink again): %w", survivors, err))
	}
	return s, nil
}

// present reports whether peer q is still here: its process lives and it
// has not closed the communicator (it may have aborted it: a survivor that
// saw the failure).
func (c *Comm) present(q int) bool {
	if atomic.LoadUint32(c.words[q].state) == stateClosed {
		return false
	}
	p := readProc(c.seg.mem, c.seg.l.ctl(q)+cProc)
	return p.pid == c.me.pid || !processGone(p)
}

// shrunkNamespace names the shared memory where the survivors of one
// Shrink meet: this namespace, shortened, and a hash of it, this
// communicator's name, the Shrink and the survivors.
func (c *Comm) shrunkNamespace(attempt uint64, survivors []int) string {
	h := fnv.New64a()
	h.Write([]byte(c.cfg.Namespace))
	h.Write([]byte{0})
	h.Write([]byte(c.name))
	var b [8]byte
	for _, x := range append([]int{int(attempt)}, survivors...) {
		binary.LittleEndian.PutUint64(b[:], uint64(x))
		h.Write(b[:])
	}
	base := c.cfg.Namespace[:min(len(c.cfg.Namespace), 80)]
	return fmt.Sprintf("%s-s%016x", base, h.Sum64())
}
