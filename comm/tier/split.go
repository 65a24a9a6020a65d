package tier

import (
	"cmp"
	"slices"

	"github.com/hiercomm/hiercomm/comm"
)

// splitLess orders the members of one Split color as Split defines it: by
// key, then by rank in the parent. It compares, never subtracts, so keys
// at the ends of int's range (math.MinInt, math.MaxInt) order correctly.
// Every implementation orders with it, so that the parts of a composed
// communicator agree on the new ranks.
func splitLess(keyA, rankA, keyB, rankB int) int {
	if c := cmp.Compare(keyA, keyB); c != 0 {
		return c
	}
	return cmp.Compare(rankA, rankB)
}

// SplitMembers is the group of color in a Split where rank r passed
// colors[r] and keys[r]: the ranks of that color, in the new
// communicator's order (splitLess). It is nil for comm.NoColor.
func SplitMembers(colors, keys []int, color int) []int {
	if color == comm.NoColor {
		return nil
	}
	return SplitGroups(colors, keys)[color]
}

// SplitGroups is every group of a Split (see SplitMembers), by color.
func SplitGroups(colors, keys []int) map[int][]int {
	groups := map[int][]int{}
	for r, c := range colors {
		if c != comm.NoColor {
			groups[c] = append(groups[c], r)
		}
	}
	for _, ms := range groups {
		slices.SortFunc(ms, func(a, b int) int { return splitLess(keys[a], a, keys[b], b) })
	}
	return groups
}
