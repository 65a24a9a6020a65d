package netemu

import (
	"strings"
	"testing"
)

// These need no root.

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64 // bits/s; 0: an error
	}{
		{"1gbit", 1e9}, {"500mbit", 500e6}, {"1.5Gbit", 1.5e9}, {"100mbps", 800e6},
		{"10kbit", 10e3}, {"1mibit", 1 << 20}, {"2000000", 2e6}, {" 1gbit ", 1e9},
		{"", 0}, {"gbit", 0}, {"1gb", 0}, {"1 gbit", 0}, {"1.2.3mbit", 0}, {"1bit", 0}, {"2tbit", 0}, {"-1mbit", 0},
	} {
		got, err := ParseRate(tc.in)
		if tc.want == 0 {
			if err == nil {
				t.Errorf("ParseRate(%q) = %d, want an error", tc.in, got)
			} else if !strings.Contains(err.Error(), "rate") {
				t.Errorf("ParseRate(%q): %v does not say what was wrong", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %d, %v, want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestTBFParams(t *testing.T) {
	for _, bits := range []uint64{8e3, 100e6, 1e9, 10e9, 100e9} {
		burst, limit := tbfParams(bits)
		if burst < 128<<10 || burst < bits/8/1000 {
			t.Errorf("%d bit/s: burst %d is below 128 KiB or 1 ms at the rate", bits, burst)
		}
		if limit <= burst {
			t.Errorf("%d bit/s: queue limit %d does not exceed the burst %d", bits, limit, burst)
		}
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Config.RanksPerNode is empty"},
		{Config{RanksPerNode: make([]int, 255)}, "at most 254"},
		{Config{RanksPerNode: []int{1, 0}}, "node 1 has 0 ranks"},
		{Config{RanksPerNode: []int{257}}, "node 0 has 257 ranks"},
		{Config{RanksPerNode: []int{1}, Rate: "fast"}, "Config.Rate"},
	} {
		f := &Fabric{cfg: tc.cfg}
		if err := f.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
}

func TestAddrAndDescribe(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{RanksPerNode: []int{2, 2}, Rate: "1gbit"}, "2 nodes × 2 ranks, one 1gbit link per rank (tbf), unlimited within a node"},
		{Config{RanksPerNode: []int{2, 2}, Rate: "500mbit", PerNode: true}, "2 nodes × 2 ranks, one 500mbit link per node shared by its ranks (tbf), unlimited within a node"},
		{Config{RanksPerNode: []int{1, 3}, Rate: "1.5gbit"}, "2 nodes (1+3 ranks), one 1.5gbit link per rank (tbf), unlimited within a node"},
		{Config{RanksPerNode: []int{1}}, "1 node × 1 rank, one unlimited link per rank, unlimited within a node"},
	} {
		f := &Fabric{cfg: tc.cfg}
		if err := f.validate(); err != nil {
			t.Fatal(err)
		}
		if got := f.Describe(); got != tc.want {
			t.Errorf("Describe() = %q, want %q", got, tc.want)
		}
	}
	f := &Fabric{cfg: Config{RanksPerNode: []int{2, 3}}}
	for _, tc := range []struct {
		node, local int
		want        string
	}{{0, 0, "10.0.0.1"}, {0, 1, "10.0.1.1"}, {1, 2, "10.0.2.2"}, {0, 2, ""}, {2, 0, ""}, {-1, 0, ""}} {
		if got := f.Addr(tc.node, tc.local); got != tc.want {
			t.Errorf("Addr(%d, %d) = %q, want %q", tc.node, tc.local, got, tc.want)
		}
	}
}
