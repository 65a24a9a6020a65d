package launchenv

import (
	"strings"
	"testing"
)

func TestParseIfSpec(t *testing.T) {
	names := []string{"eth0", "eth1", "ens5", "ib0", "docker0", "dockerx", "lo", "lo0", "lotus", "veth1"}
	cases := []struct {
		spec    string
		matches []string // of names; the others must not match
	}{
		{"", []string{"eth0", "eth1", "ens5", "ib0", "veth1"}},
		{"eth", []string{"eth0", "eth1"}},
		{"eth,ib", []string{"eth0", "eth1", "ib0"}},
		{"e", []string{"eth0", "eth1", "ens5"}},
		{"^docker,lo", []string{"eth0", "eth1", "ens5", "ib0", "veth1"}},
		{"^eth", []string{"ens5", "ib0", "docker0", "dockerx", "lo", "lo0", "lotus", "veth1"}},
		{"=eth0", []string{"eth0"}},
		{"=eth", nil},
		{"=eth0,ib0", []string{"eth0", "ib0"}},
		{"^=docker0", []string{"eth0", "eth1", "ens5", "ib0", "dockerx", "lo", "lo0", "lotus", "veth1"}},
		{"^=docker0,lo", []string{"eth0", "eth1", "ens5", "ib0", "dockerx", "lo0", "lotus", "veth1"}},
		{"lo", []string{"lo", "lo0", "lotus"}},
		{"=lo", []string{"lo"}},
	}
	for _, tc := range cases {
		spec, err := ParseIfSpec(tc.spec)
		if err != nil {
			t.Errorf("ParseIfSpec(%q): %v", tc.spec, err)
			continue
		}
		if spec.String() != tc.spec {
			t.Errorf("ParseIfSpec(%q).String() = %q", tc.spec, spec.String())
		}
		if spec.IsDefault() != (tc.spec == "") {
			t.Errorf("ParseIfSpec(%q).IsDefault() = %v", tc.spec, spec.IsDefault())
		}
		for _, n := range names {
			want := false
			for _, m := range tc.matches {
				want = want || m == n
			}
			if got := spec.Matches(n); got != want {
				t.Errorf("ParseIfSpec(%q).Matches(%q) = %v, want %v", tc.spec, n, got, want)
			}
		}
	}
	if !(IfSpec{}).IsDefault() {
		t.Error("the zero IfSpec is not the default")
	}
}

func TestParseIfSpecErrors(t *testing.T) {
	cases := map[string]string{
		"^":                  "names no interface",
		"=":                  "names no interface",
		"^=":                 "names no interface",
		"eth,,ib":            "empty name",
		"eth,":               "empty name",
		",eth":               "empty name",
		"eth0:1234":          "port",
		"eth 0":              "not an interface name",
		"eth=0":              "not an interface name",
		"^^eth":              "not an interface name",
		"eth,^ib":            "not an interface name",
		"a/b":                "not an interface name",
		"abcdefghijklmnopq":  "longer than 15 bytes",
		"=abcdefghijklmnop0": "longer than 15 bytes",
	}
	for in, want := range cases {
		_, err := ParseIfSpec(in)
		if err == nil {
			t.Errorf("ParseIfSpec(%q) succeeded", in)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), in) {
			t.Errorf("ParseIfSpec(%q): %q, want it to quote the spec and say %q", in, err, want)
		}
	}
}
