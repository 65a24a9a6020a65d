package transport

import (
	"math/bits"
	"sync"
)

// Frame payloads come from size-classed pools (powers of two from 64 B to
// MaxFrame) so that the receive path does not allocate per frame.
const minClass = 6 // 64 bytes

var pools [25]sync.Pool // classes up to 1<<24 = MaxFrame

// holders keeps the empty *[]byte cells that carry buffers through pools:
// putting a slice into a sync.Pool boxes its header, one allocation per
// frame; a cell from here, filled and put, allocates nothing.
var holders sync.Pool

func class(n int) int {
	if n <= 1<<minClass {
		return minClass
	}
	return bits.Len(uint(n - 1))
}

// GetBuf returns a buffer of length n whose capacity is n rounded up to a
// power of two. Its contents are undefined.
func GetBuf(n int) []byte {
	if n == 0 {
		return nil
	}
	c := class(n)
	if c >= len(pools) {
		return make([]byte, n)
	}
	if p, ok := pools[c].Get().(*[]byte); ok {
		b := (*p)[:n]
		*p = nil
		holders.Put(p)
		return b
	}
	return make([]byte, n, 1<<c)
}

// PutBuf returns b, obtained from GetBuf, to its pool. The caller must not
// use b afterwards.
func PutBuf(b []byte) {
	c := cap(b)
	if c == 0 || c&(c-1) != 0 || c < 1<<minClass || c > MaxFrame {
		return
	}
	p, ok := holders.Get().(*[]byte)
	if !ok {
		p = new([]byte)
	}
	*p = b[:0]
	pools[bits.Len(uint(c))-1].Put(p)
}
