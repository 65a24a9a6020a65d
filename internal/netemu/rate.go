package netemu

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// rateUnits are tc's rate units (tc(8), "RATES"), in bits per second: SI
// and IEC prefixes, in bits ("bit") or bytes ("bps") per second.
var rateUnits = map[string]float64{
	"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
	"kibit": 1 << 10, "mibit": 1 << 20, "gibit": 1 << 30, "tibit": 1 << 40,
	"bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12,
	"kibps": 8 << 10, "mibps": 8 << 20, "gibps": 8 << 30, "tibps": 8 << 40,
}

// ParseRate parses a rate the way tc writes it: a number and a unit, such
// as "1gbit", "500mbit", "1.5gbit" or "100mbps" (bytes: tc's "bps" is bytes
// per second); a bare number is bits per second. It returns bits per
// second. Rates below 8 kbit/s and above 1 tbit/s are errors, since tbf
// cannot shape them usefully on this host.
func ParseRate(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, "bit"
	if i >= 0 {
		num, unit = t[:i], t[i:]
	}
	mult, ok := rateUnits[unit]
	if !ok {
		return 0, fmt.Errorf("netemu: rate %q: unknown unit %q; want a number and bit, kbit, mbit, gbit (bits/s) or bps, kbps, mbps, gbps (bytes/s), as tc takes them", s, unit)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" {
		return 0, fmt.Errorf("netemu: rate %q: %q is not a number; write it as tc does, e.g. 1gbit or 500mbit", s, num)
	}
	bits := v * mult
	if bits < 8e3 || bits > 1e12 || math.IsNaN(bits) {
		return 0, fmt.Errorf("netemu: rate %q is %.4g bit/s; want 8kbit to 1tbit", s, bits)
	}
	return uint64(bits), nil
}

// formatRate writes bits per second in tc's largest whole-ish SI unit.
func formatRate(bits uint64) string {
	for _, u := range []struct {
		name string
		v    uint64
	}{{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}} {
		if bits >= u.v {
			return strconv.FormatFloat(float64(bits)/float64(u.v), 'f', -1, 64) + u.name
		}
	}
	return strconv.FormatUint(bits, 10) + "bit"
}

// tbfParams are the burst and the queue limit, in bytes, of a tbf at rate
// bits/s. The burst covers 1 ms at the rate and at least 128 KiB, so that a
// 64 KiB GSO packet passes whole (tbf would cut it up otherwise) and the
// shaper's timer resolution does not cap the rate; over a transfer of a
// second it lets through well under 1% more than the rate. The queue holds
// the burst and 10 ms at the rate: like a switch port's buffer, enough for
// one flow to fill the link, and a sender that overruns it loses packets.
func tbfParams(bits uint64) (burst, limit uint64) {
	perMs := bits / 8 / 1000
	burst = max(perMs, 128<<10)
	limit = burst + 10*perMs
	return burst, max(limit, 256<<10)
}
