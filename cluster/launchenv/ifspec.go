package launchenv

import (
	"fmt"
	"strings"
)

// IfSpec chooses network interfaces by name, in the syntax of NCCL's
// NCCL_SOCKET_IFNAME, so one setting serves NCCL and hiercomm alike:
//
//	eth,ib        interfaces whose names start with eth or ib
//	^docker,lo    every interface except those starting with docker or lo
//	=eth0,ib1     exactly eth0 and ib1
//	^=docker0     every interface except exactly docker0
//	(empty)       the default: every interface except docker*, lo* and
//	              loopback ones; if none of them is usable, loopback
//
// The zero IfSpec is the default. IfSpecs are values; ParseIfSpec makes
// them. Parsing and matching names is all this package does: listing this
// machine's interfaces and choosing an address among them is cluster's
// (cluster.SystemIfaces, cluster.SelectAddr).
type IfSpec struct {
	// Source names where the spec came from ("HIERCOMM_SOCKET_IFNAME",
	// "NCCL_SOCKET_IFNAME", an option's name) so cluster.SelectAddr's
	// errors point at the setting to change. It does not affect matching. If empty,
	// messages say "interface spec".
	Source string

	exclude bool     // ^: names select what is skipped
	exact   bool     // =: names are whole names, not prefixes
	names   []string // nil: the default spec
}

// maxIfName is the longest interface name Linux allows (IFNAMSIZ-1).
const maxIfName = 15

// defaultExcludes are the prefixes the default spec skips, as NCCL's
// default does: container bridges and loopback are not how nodes reach
// each other.
var defaultExcludes = []string{"docker", "lo"}

// ParseIfSpec parses s in NCCL_SOCKET_IFNAME syntax (see IfSpec). The empty
// string is the default spec. Names are separated by commas; an optional
// '^' (exclude) and then an optional '=' (exact) apply to the whole list.
// Empty names, names longer than 15 bytes, and characters no interface name
// has (space, '/', ':') are errors; NCCL's ":port" suffix is not supported.
func ParseIfSpec(s string) (IfSpec, error) {
	var spec IfSpec
	if s == "" {
		return spec, nil
	}
	rest := s
	if r, ok := strings.CutPrefix(rest, "^"); ok {
		spec.exclude, rest = true, r
	}
	if r, ok := strings.CutPrefix(rest, "="); ok {
		spec.exact, rest = true, r
	}
	if rest == "" {
		return IfSpec{}, fmt.Errorf("interface spec %q names no interface; write e.g. \"eth\" (prefix), \"=eth0\" (exact), \"^docker,lo\" (exclude), or leave it empty for the default", s)
	}
	for name := range strings.SplitSeq(rest, ",") {
		switch {
		case name == "":
			return IfSpec{}, fmt.Errorf("interface spec %q has an empty name; separate names with single commas", s)
		case strings.Contains(name, ":"):
			return IfSpec{}, fmt.Errorf("interface spec %q: %q has a port or ':'; hiercomm takes interface names only", s, name)
		case strings.ContainsAny(name, " \t\n/^=,"):
			return IfSpec{}, fmt.Errorf("interface spec %q: %q is not an interface name ('^' and '=' go once, before the whole list)", s, name)
		case len(name) > maxIfName:
			return IfSpec{}, fmt.Errorf("interface spec %q: %q is longer than %d bytes, the longest interface name Linux allows", s, name, maxIfName)
		}
		spec.names = append(spec.names, name)
	}
	return spec, nil
}

// String returns s in the syntax ParseIfSpec reads; "" for the default.
func (s IfSpec) String() string {
	if s.names == nil {
		return ""
	}
	var b strings.Builder
	if s.exclude {
		b.WriteByte('^')
	}
	if s.exact {
		b.WriteByte('=')
	}
	b.WriteString(strings.Join(s.names, ","))
	return b.String()
}

// IsDefault reports whether s is the default spec (parsed from "").
func (s IfSpec) IsDefault() bool { return s.names == nil }

// Matches reports whether the interface named name is selected by s. For
// the default spec it reports the first choice only (not docker*, not
// lo*); loopback interfaces are cluster.SelectAddr's fallback.
func (s IfSpec) Matches(name string) bool {
	if s.names == nil {
		for _, p := range defaultExcludes {
			if strings.HasPrefix(name, p) {
				return false
			}
		}
		return true
	}
	hit := false
	for _, n := range s.names {
		if name == n || !s.exact && strings.HasPrefix(name, n) {
			hit = true
			break
		}
	}
	return hit != s.exclude
}
