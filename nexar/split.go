package nexar

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// Split implements comm.Communicator. It is a collective on c: every rank
// contributes (color, key) through an AllGather, then every rank computes
// the same groups. The child's id is derived from c's id, the Split's
// sequence number and the color, so every member agrees on it without
// another round and no two communicators of one world share an id.
func (c *Comm) Split(ctx context.Context, color, key int) (comm.Communicator, error) {
	var verr error
	if color < 0 && color != comm.NoColor {
		verr = &comm.ArgError{Kind: comm.KindSplit, Arg: "color", Problem: fmt.Sprintf("%d is negative; use a color ≥ 0, or comm.NoColor (%d) to take part without joining", color, comm.NoColor)}
	}
	sig := comm.Signature{Kind: comm.KindSplit, DType: comm.I64, Root: -1, Count: 2}
	var child *Comm
	err := c.doSplit(ctx, sig, verr, func(o *op) error {
		var err error
		child, err = c.split(o, color, key)
		return err
	})
	if err != nil {
		return nil, err
	}
	if child == nil {
		return nil, nil
	}
	return child, nil
}

func (c *Comm) split(o *op, color, key int) (*Comm, error) {
	P, r := c.Size(), c.rank
	all := make([]byte, 16*P)
	binary.LittleEndian.PutUint64(all[16*r:], uint64(int64(color)))
	binary.LittleEndian.PutUint64(all[16*r+8:], uint64(int64(key)))
	if err := ringAllGather(o, all, 8); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.splits++
	nth := c.splits
	c.mu.Unlock()
	if color == comm.NoColor {
		return nil, nil
	}
	colors, keys := make([]int, P), make([]int, P)
	for i := range P {
		colors[i] = int(int64(binary.LittleEndian.Uint64(all[16*i:])))
		keys[i] = int(int64(binary.LittleEndian.Uint64(all[16*i+8:])))
	}
	members := tier.SplitMembers(colors, keys, color)
	for i, r := range members {
		members[i] = c.members[r]
	}
	h := fnv.New64a()
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], c.id)
	binary.LittleEndian.PutUint64(b[8:], o.seq)
	binary.LittleEndian.PutUint64(b[16:], uint64(int64(color)))
	h.Write(b[:])
	id := h.Sum64()
	name := fmt.Sprintf("%s/split#%d(color %d)", c.name, nth, color)
	child := newComm(c.w, id, name, members, c.opt, false)
	if err := c.w.register(child); err != nil {
		return nil, err
	}
	return child, nil
}
