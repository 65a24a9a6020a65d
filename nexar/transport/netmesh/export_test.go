package netmesh

import "github.com/hiercomm/hiercomm/nexar/transport"

// appendHeader appends the encoding of h to b.
func appendHeader(b []byte, h transport.Header) []byte {
	n := len(b)
	b = append(b, make([]byte, HeaderSize)...)
	putHeader(b[n:], h)
	return b
}
