package topology

import "strings"

// compareHosts is the natural order of host ids: runs of digits compare by
// their numeric value, so "node-2" sorts before "node-10" and "gpu9" before
// "gpu10"; everything else compares byte by byte. Ids that differ only in
// leading zeros ("n02", "n2") are equal in natural order and are ordered
// bytewise, so that the order is total and sorting is deterministic.
func compareHosts(a, b string) int {
	if c := compareNatural(a, b); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// compareNatural compares a and b as sequences of tokens, a token being a
// maximal run of digits (compared by value, of any length) or a single
// other byte. A run of digits compares to another byte as its first digit
// does, so token order is total and the comparison is transitive.
func compareNatural(a, b string) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if isDigit(a[i]) && isDigit(b[j]) {
			si, sj := i, j
			for i < len(a) && isDigit(a[i]) {
				i++
			}
			for j < len(b) && isDigit(b[j]) {
				j++
			}
			da := strings.TrimLeft(a[si:i], "0")
			db := strings.TrimLeft(b[sj:j], "0")
			if len(da) != len(db) {
				return sign(len(da) - len(db))
			}
			if c := strings.Compare(da, db); c != 0 {
				return c
			}
			continue
		}
		if a[i] != b[j] {
			return sign(int(a[i]) - int(b[j]))
		}
		i++
		j++
	}
	// One side is exhausted; the one with tokens left is greater.
	return sign((len(a) - i) - (len(b) - j))
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
