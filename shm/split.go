package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// splitOp carries Split's arguments and result through the executor.
type splitOp struct {
	color, key int
	child      *Comm
}

// Split implements comm.Communicator. It is a collective on c of two steps:
// the header step carries every rank's color and key; then the first rank
// of each new group creates the group's segment and says, in the second
// step, whether it could, so the others open a file that exists (or fail
// at once). The child's file name is derived from c's, the Split's
// sequence number and the color, so siblings and parent never collide;
// the child has its own segment, sequence and steps, and is closed on its
// own.
func (c *Comm) Split(ctx context.Context, color, key int) (comm.Communicator, error) {
	o := op{ctx: ctx, sig: comm.Signature{Kind: comm.KindSplit, DType: comm.I64, Root: -1, Count: 2},
		split: &splitOp{color: color, key: key}}
	if color < 0 && color != comm.NoColor {
		o.verr = &comm.ArgError{Kind: comm.KindSplit, Arg: "color",
			Problem: fmt.Sprintf("%d is negative; use a color ≥ 0, or comm.NoColor (%d) to take part without joining", color, comm.NoColor)}
	}
	if err := c.exec.Do(ctx, comm.Call{Kind: comm.KindSplit}, o.verr, o); err != nil {
		return nil, err
	}
	if o.split.child == nil {
		return nil, nil
	}
	return o.split.child, nil
}

func (c *Comm) splitSchedule(s *stepper) error {
	sp := s.o.split
	s.counts = []int64{int64(sp.color), int64(sp.key)}
	if err := s.step(nil); err != nil {
		return err
	}
	hdr := s.cur()
	colors, keys := make([]int, c.size), make([]int, c.size)
	for q := range c.size {
		colors[q], keys[q] = sp.color, sp.key
		if q != c.rank {
			colors[q], keys[q] = int(s.peerCount(q, hdr, 0)), int(s.peerCount(q, hdr, 1))
		}
	}
	group := tier.SplitMembers(colors, keys, sp.color)
	c.mu.Lock()
	c.splits++
	nth := c.splits
	c.mu.Unlock()

	// Step 2: the first rank of each group creates its segment.
	childRank := slices.Index(group, c.rank)
	creator := -1
	if len(group) > 0 {
		creator = group[0]
	}
	cfg := c.cfg
	cfg.Rank, cfg.Size = childRank, len(group)
	name := fmt.Sprintf("%s/split#%d(color %d)", c.name, nth, sp.color)
	cfg.Name, cfg.Ranks = name, c.jobRanks(group)
	path := segmentPath(c.cfg.Namespace, c.childFile(s.o.seq, sp.color))
	var seg *segment
	var createErr error
	if creator == c.rank {
		seg, createErr = createSegment(path, cfg.Size, max(cfg.SlotBytes, 256*cfg.Size), cfg.StepBytes, cfg.eagerBytes(), c.me, c.cfg.Logger)
	}
	if err := s.step(func(p []byte) {
		p[0] = 0
		if createErr != nil {
			p[0] = 1
			msg := createErr.Error()
			binary.LittleEndian.PutUint32(p[8:], uint32(len(msg)))
			copy(p[16:], msg)
		}
	}); err != nil {
		if seg != nil {
			seg.unlink()
			seg.unmap()
		}
		return err
	}
	if sp.color == comm.NoColor {
		return nil
	}
	if createErr != nil {
		return createErr
	}
	if creator != c.rank {
		p := s.read(creator)
		if p[0] != 0 {
			n := min(int(binary.LittleEndian.Uint32(p[8:])), len(p)-16)
			return &comm.RemoteError{Peer: creator, Reason: "creating the new communicator's segment: " + string(p[16:16+n])}
		}
		var err error
		if seg, _, err = openOnce(path, cfg.Size); err == nil && seg == nil {
			err = errors.New("shm: the new communicator's segment vanished before this rank opened it")
		}
		if err != nil {
			return err
		}
	}
	// Attaching is bounded by the Split's context and ConnectTimeout.
	ctx, cancel := context.WithTimeout(s.b.ctx, c.cfg.ConnectTimeout)
	defer cancel()
	if err := seg.register(childRank, c.me); err != nil {
		if seg.created {
			seg.unlink()
		}
		seg.unmap()
		return err
	}
	child := newComm(cfg, name, seg, c.me)
	if err := seg.waitAttached(ctx); err != nil {
		child.Close()
		return err
	}
	seg.unlink()
	child.attached()
	sp.child = child
	return nil
}

// jobRanks are Config.Ranks of a communicator of ranks of this one (nil
// if this one has none).
func (c *Comm) jobRanks(ranks []int) []int {
	if c.cfg.Ranks == nil {
		return nil
	}
	out := make([]int, len(ranks))
	for i, r := range ranks {
		out[i] = c.cfg.Ranks[r]
	}
	return out
}

// childFile names the segment of the child of color made by the Split with
// sequence number seq: a hash of this communicator's file, seq and color.
func (c *Comm) childFile(seq uint64, color int) string {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[0:], seq)
	binary.LittleEndian.PutUint64(b[8:], uint64(int64(color)))
	h.Write([]byte(c.seg.path))
	h.Write(b[:])
	return fmt.Sprintf("%016x", h.Sum64())
}
