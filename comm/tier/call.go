package tier

import "github.com/hiercomm/hiercomm/comm"

// Offsets are where blocks of counts[i] elements, packed in order (as
// AllToAllV's buffers are), begin, in units of unit: 1 for elements, the
// dtype's size for bytes.
func Offsets(counts []int, unit int) []int {
	off := make([]int, len(counts))
	at := 0
	for i, n := range counts {
		off[i] = at
		at += n * unit
	}
	return off
}

// ResultAt is the buffer rank's result of c lands in (where an Avg is
// divided): Recv, or none for a non-root rank of Reduce.
func ResultAt(c comm.Call, rank int) comm.Buffer {
	if c.Kind == comm.KindReduce && c.Root != rank {
		return comm.Buffer{}
	}
	return c.Recv
}
