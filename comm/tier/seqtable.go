package tier

import (
	"maps"
	"slices"
)

// seqTable maps collective sequence numbers to V: the few a communicator
// holds at once (the collectives in flight, the notes of those peers are
// ahead in) sit in an array, and only more than that go to a map, so
// that the entry a collective adds at its Start and removes at its
// Finish, on every call, costs no hashing. A Failure's tables hold one
// or two entries almost always; seqSlots leaves room for a few queued.
type seqTable[V any] struct {
	slot [seqSlots]seqEntry[V]
	more map[uint64]V
}

const seqSlots = 4

type seqEntry[V any] struct {
	seq  uint64
	used bool
	v    V
}

// get is seq's entry, if there is one.
func (t *seqTable[V]) get(seq uint64) (V, bool) {
	for i := range t.slot {
		if e := &t.slot[i]; e.used && e.seq == seq {
			return e.v, true
		}
	}
	if len(t.more) > 0 {
		v, ok := t.more[seq]
		return v, ok
	}
	var zero V
	return zero, false
}

// set makes v seq's entry.
func (t *seqTable[V]) set(seq uint64, v V) {
	free := -1
	for i := range t.slot {
		switch e := &t.slot[i]; {
		case e.used && e.seq == seq:
			e.v = v
			return
		case !e.used && free < 0:
			free = i
		}
	}
	if _, ok := t.more[seq]; ok || free < 0 {
		if t.more == nil {
			t.more = map[uint64]V{}
		}
		t.more[seq] = v
		return
	}
	t.slot[free] = seqEntry[V]{seq: seq, used: true, v: v}
}

// take removes seq's entry and returns it, if there was one.
func (t *seqTable[V]) take(seq uint64) (V, bool) {
	for i := range t.slot {
		if e := &t.slot[i]; e.used && e.seq == seq {
			v := e.v
			*e = seqEntry[V]{}
			return v, true
		}
	}
	v, ok := t.more[seq]
	if ok {
		delete(t.more, seq)
	}
	return v, ok
}

// len is the number of entries.
func (t *seqTable[V]) len() int {
	n := len(t.more)
	for i := range t.slot {
		if t.slot[i].used {
			n++
		}
	}
	return n
}

// seqs is every entry's sequence number, in order.
func (t *seqTable[V]) seqs() []uint64 {
	s := slices.Collect(maps.Keys(t.more))
	for i := range t.slot {
		if t.slot[i].used {
			s = append(s, t.slot[i].seq)
		}
	}
	slices.Sort(s)
	return s
}
