package nexar

// appendHeader appends the encoding of h to b.
func appendHeader(b []byte, h Header) []byte {
	n := len(b)
	b = append(b, make([]byte, HeaderSize)...)
	putHeader(b[n:], h)
	return b
}
