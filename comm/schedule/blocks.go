package schedule

// BlockRange splits n items into parts nearly equal blocks and returns the
// offset and length of block i: the first n%parts blocks have one item more.
// Every schedule cuts buffers with it, so a count that parts does not
// divide is handled exactly, and every rank computes the same cut.
func BlockRange(n, parts, i int) (off, length int) {
	base, rem := n/parts, n%parts
	off = i*base + min(i, rem)
	length = base
	if i < rem {
		length++
	}
	return off, length
}

// Segments is how many pipelining segments a block of n elements is cut
// into when a segment holds at most seg elements (at least one segment, so
// empty blocks still send one empty frame and every rank counts the same).
func Segments(n, seg int) int {
	return max(1, (n+seg-1)/seg)
}

// pieceRange is piece i of a message of n elements sent as Segments(n,
// seg) frames: unlike BlockRange's nearly equal cut, a message's pieces
// are seg long but for the last.
func pieceRange(n, seg, i int) (off, length int) {
	off = i * seg
	return off, max(0, min(n, off+seg)-off)
}

// mod is the non-negative remainder.
func mod(a, n int) int { return ((a % n) + n) % n }
