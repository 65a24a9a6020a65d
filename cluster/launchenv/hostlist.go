package launchenv

import (
	"fmt"
	"strconv"
	"strings"
)

// maxHostListLen caps what ExpandHostList produces, so a typo such as
// "n[0-999999999]" is an error instead of gigabytes of names.
const maxHostListLen = 1 << 20

// ExpandHostList expands a Slurm host list, as in SLURM_JOB_NODELIST, into
// host names in order:
//
//	gpu[01-04,07],cpu3,n[1-2]x  →  gpu01 gpu02 gpu03 gpu04 gpu07 cpu3 n1x n2x
//
// A bracket group holds comma-separated numbers and ranges lo-hi; a
// range's names are zero-padded to the width of lo ("[08-10]" gives 08 09
// 10, "[8-10]" gives 8 9 10). A name may have several groups, the first
// varying slowest: "n[1-2]-r[1-2]" gives n1-r1 n1-r2 n2-r1 n2-r2. Malformed
// lists (unbalanced or nested brackets, empty names or groups, non-digits
// or a descending range in a group) and lists of more than 2^20 names are
// errors.
func ExpandHostList(s string) ([]string, error) {
	bad := func(format string, a ...any) ([]string, error) {
		return nil, fmt.Errorf("host list %q: "+format, append([]any{s}, a...)...)
	}
	if s == "" {
		return bad("empty")
	}
	items, err := splitHostList(s)
	if err != nil {
		return bad("%v", err)
	}
	parsed := make([][]hostSegment, len(items))
	total := 0
	for i, item := range items {
		segs, n, err := parseHostItem(item)
		if err != nil {
			return bad("%v", err)
		}
		if n > maxHostListLen-total {
			return bad("expands to more than %d hosts", maxHostListLen)
		}
		parsed[i], total = segs, total+n
	}
	hosts := make([]string, 0, total)
	for _, segs := range parsed {
		hosts = expandHostItem(hosts, segs)
	}
	return hosts, nil
}

// hostSegment is a literal piece of a host name (ranges nil) or a bracket
// group (ranges non-nil).
type hostSegment struct {
	lit    string
	ranges []hostRange
}

// hostRange is lo..hi, printed zero-padded to width digits.
type hostRange struct {
	lo, hi uint64
	width  int
}

// splitHostList splits s at the commas outside brackets and checks that
// brackets pair up without nesting.
func splitHostList(s string) ([]string, error) {
	var items []string
	start, open := 0, -1
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			if open >= 0 {
				return nil, fmt.Errorf("'[' at offset %d inside the group opened at %d; groups do not nest", i, open)
			}
			open = i
		case ']':
			if open < 0 {
				return nil, fmt.Errorf("']' at offset %d closes no group", i)
			}
			open = -1
		case ',':
			if open < 0 {
				items = append(items, s[start:i])
				start = i + 1
			}
		}
	}
	if open >= 0 {
		return nil, fmt.Errorf("the group opened at offset %d is not closed", open)
	}
	return append(items, s[start:]), nil
}

// parseHostItem parses one host expression (no top-level commas) and
// returns its segments and how many names it expands to (at most
// maxHostListLen+1: beyond that the count stops mattering).
func parseHostItem(item string) ([]hostSegment, int, error) {
	if item == "" {
		return nil, 0, fmt.Errorf("empty host name (two commas in a row, or one at an end)")
	}
	var segs []hostSegment
	count := 1
	for rest := item; rest != ""; {
		i := strings.IndexByte(rest, '[')
		if i < 0 {
			i = len(rest)
		}
		if lit := rest[:i]; lit != "" {
			if strings.ContainsAny(lit, " \t\n") {
				return nil, 0, fmt.Errorf("%q: host names have no spaces", item)
			}
			segs = append(segs, hostSegment{lit: lit})
		}
		if i == len(rest) {
			break
		}
		j := strings.IndexByte(rest, ']') // exists: splitHostList checked the pairing
		ranges, n, err := parseHostGroup(rest[i+1 : j])
		if err != nil {
			return nil, 0, fmt.Errorf("%q: %v", item, err)
		}
		segs = append(segs, hostSegment{ranges: ranges})
		if n > (maxHostListLen+1)/count {
			count = maxHostListLen + 1
		} else {
			count *= n
		}
		rest = rest[j+1:]
	}
	return segs, count, nil
}

// parseHostGroup parses the inside of a bracket group: "01-04,07".
func parseHostGroup(g string) ([]hostRange, int, error) {
	if g == "" {
		return nil, 0, fmt.Errorf("empty group []")
	}
	var ranges []hostRange
	n := 0
	for part := range strings.SplitSeq(g, ",") {
		loS, hiS, isRange := strings.Cut(part, "-")
		if !isRange {
			hiS = loS
		}
		lo, err1 := parseHostNum(loS)
		hi, err2 := parseHostNum(hiS)
		switch {
		case err1 != nil || err2 != nil:
			return nil, 0, fmt.Errorf("[%s]: %q is not a number or a range lo-hi", g, part)
		case hi < lo:
			return nil, 0, fmt.Errorf("[%s]: range %q goes down", g, part)
		}
		ranges = append(ranges, hostRange{lo: lo, hi: hi, width: len(loS)})
		if size := hi - lo + 1; size > uint64(maxHostListLen) || n+int(size) > maxHostListLen {
			n = maxHostListLen + 1
		} else {
			n += int(size)
		}
	}
	return ranges, n, nil
}

// parseHostNum parses a run of 1 to 18 decimal digits (so hi-lo+1 cannot
// overflow).
func parseHostNum(s string) (uint64, error) {
	if s == "" || len(s) > 18 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("bad number %q", s)
	}
	return strconv.ParseUint(s, 10, 64)
}

// expandHostItem appends to hosts every name segs expands to, the first
// group varying slowest.
func expandHostItem(hosts []string, segs []hostSegment) []string {
	names := []string{""}
	for _, seg := range segs {
		if seg.ranges == nil {
			for i := range names {
				names[i] += seg.lit
			}
			continue
		}
		var next []string
		for _, prefix := range names {
			for _, r := range seg.ranges {
				for v := r.lo; v <= r.hi; v++ {
					next = append(next, prefix+padNum(v, r.width))
				}
			}
		}
		names = next
	}
	return append(hosts, names...)
}

// padNum formats v in decimal with leading zeros up to width digits.
func padNum(v uint64, width int) string {
	s := strconv.FormatUint(v, 10)
	if len(s) < width {
		s = strings.Repeat("0", width-len(s)) + s
	}
	return s
}
