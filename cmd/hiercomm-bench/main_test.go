package main

import (
	"io"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/bench"
)

func TestParseNetDev(t *testing.T) {
	const text = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:  123456     100    0    0    0     0          0         0   123456     100    0    0    0     0       0          0
  nic0: 9876543   20000    0    0    0     0          0         0 55555555   30000    0    0    0     0       0          0
  nic1:       1       2    3    4    5     6          7         8       42       1    0    0    0     0       0          0
`
	for nic, want := range map[string]int64{"nic0": 55555555, "nic1": 42, "lo": 123456} {
		got, err := parseNetDev(text, nic)
		if err != nil || got != want {
			t.Errorf("%s: %d, %v; want %d (the transmitted bytes)", nic, got, err, want)
		}
	}
	if _, err := parseNetDev(text, "nic2"); err == nil || !strings.Contains(err.Error(), "no interface nic2") {
		t.Errorf("missing nic2: %v, want an error naming it", err)
	}
	if _, err := parseNetDev("  nic0: 1 2 3\n", "nic0"); err == nil {
		t.Error("a short line parsed")
	}
}

func TestParseSwitch(t *testing.T) {
	for in, want := range map[string][2]int64{"16K-1M": {16 << 10, 1 << 20}, "off": {0, 0}, "8-8": {8, 8}} {
		from, to, err := parseSwitch(in)
		if err != nil || from != want[0] || to != want[1] {
			t.Errorf("%q: %d-%d, %v; want %d-%d", in, from, to, err, want[0], want[1])
		}
	}
	for _, in := range []string{"16K", "1M-16K", "0-1K", "x-1M", "16K-y"} {
		if _, _, err := parseSwitch(in); err == nil {
			t.Errorf("%q parsed", in)
		}
	}
}

func TestParseArgsLimits(t *testing.T) {
	o, err := parseArgs(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.LinkRate == "" || o.cfg.SwitchFrom == 0 || o.cfg.SwitchTo < o.cfg.SwitchFrom {
		t.Errorf("default: link rate %q, switch %d-%d; want a rate and a switch range", o.cfg.LinkRate, o.cfg.SwitchFrom, o.cfg.SwitchTo)
	}
	o, err = parseArgs([]string{"-link-rate", "off", "-switch", "off", "-limiter", "wrapper"}, io.Discard)
	if err != nil || o.cfg.LinkRate != "off" || o.cfg.SwitchFrom != 0 || o.limiter != limitWrapper {
		t.Errorf("-link-rate off -switch off -limiter wrapper: %+v, %v", o, err)
	}
	o, err = parseArgs([]string{"-switch", "32K-256K"}, io.Discard)
	if err != nil || o.cfg.SwitchFrom != bench.Size(32<<10) || o.cfg.SwitchTo != bench.Size(256<<10) {
		t.Errorf("-switch 32K-256K: %d-%d, %v", o.cfg.SwitchFrom, o.cfg.SwitchTo, err)
	}
	for _, args := range [][]string{{"-link-rate", "fast"}, {"-switch", "1M"}, {"-limiter", "netem"}} {
		if _, err := parseArgs(args, io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// -conns reaches the children as HIERCOMM_CONNS_PER_PEER; a count the
// transport would refuse, or one in process, is refused here first.
func TestParseArgsConns(t *testing.T) {
	o, err := parseArgs([]string{"-conns", "4"}, io.Discard)
	if err != nil || o.cfg.Conns != 4 {
		t.Fatalf("-conns 4: %d, %v", o.cfg.Conns, err)
	}
	for args, want := range map[string][]string{
		"-conns 0 is the default": {"-conns", "0"},
		"-conns 1 in process":     {"-conns", "1", "-inprocess"},
	} {
		if _, err := parseArgs(want, io.Discard); err != nil {
			t.Errorf("%s: %v", args, err)
		}
	}
	for _, args := range [][]string{{"-conns", "-1"}, {"-conns", "65"}, {"-conns", "2", "-inprocess"}} {
		if _, err := parseArgs(args, io.Discard); err == nil || !strings.Contains(err.Error(), "-conns") {
			t.Errorf("%v: %v; want an error naming -conns", args, err)
		}
	}
}

func TestLinkBits(t *testing.T) {
	for in, want := range map[string]uint64{"": 0, "off": 0, "1gbit": 1e9, "500mbit": 500e6} {
		got, err := linkBits(in)
		if err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", in, got, err, want)
		}
	}
}
