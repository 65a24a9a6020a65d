package launchenv

import (
	"slices"
	"strings"
	"testing"
)

func TestExpandHostList(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"node1", []string{"node1"}},
		{"a,b,c", []string{"a", "b", "c"}},
		{"gpu[01-04,07],cpu3,n[1-2]x", []string{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu3", "n1x", "n2x"}},
		{"n[8-10]", []string{"n8", "n9", "n10"}},
		{"n[08-10]", []string{"n08", "n09", "n10"}},
		{"n[001-3]", []string{"n001", "n002", "n003"}},
		{"n[98-101]", []string{"n98", "n99", "n100", "n101"}},
		{"n[0-0]", []string{"n0"}},
		{"n[00]", []string{"n00"}},
		{"n[5]", []string{"n5"}},
		{"n[3,1]", []string{"n3", "n1"}},
		{"[1-3]", []string{"1", "2", "3"}},
		{"127.0.0.[1-3]", []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}},
		{"n[1-2]-r[1-2]", []string{"n1-r1", "n1-r2", "n2-r1", "n2-r2"}},
		{"x[1-2]y[3,5]z", []string{"x1y3z", "x1y5z", "x2y3z", "x2y5z"}},
		{"a[1-2],b[01-02]c[7]", []string{"a1", "a2", "b01c7", "b02c7"}},
		{"rack-1-n[1-2]", []string{"rack-1-n1", "rack-1-n2"}},
	}
	for _, tc := range cases {
		got, err := ExpandHostList(tc.in)
		if err != nil {
			t.Errorf("ExpandHostList(%q): %v", tc.in, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ExpandHostList(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestExpandHostListErrors(t *testing.T) {
	cases := map[string]string{
		"":                        "empty",
		"gpu[01-04":               "not closed",
		"gpu01]":                  "closes no group",
		"gpu[[1]]":                "do not nest",
		"gpu[]":                   "empty group",
		"gpu[a-b]":                "not a number",
		"gpu[1-]":                 "not a number",
		"gpu[-1]":                 "not a number",
		"gpu[1-2-3]":              "not a number",
		"gpu[1,,2]":               "not a number",
		"gpu[ 1]":                 "not a number",
		"gpu[5-3]":                "goes down",
		"a,,b":                    "empty host name",
		",a":                      "empty host name",
		"a,":                      "empty host name",
		"a b":                     "no spaces",
		"n[1234567890123456789]":  "not a number",
		"n[0-1048576]":            "more than 1048576 hosts",
		"n[0-1023]r[0-1024]":      "more than 1048576 hosts",
		"a[0-1048575],b":          "more than 1048576 hosts",
		"a[0-999999999999999999]": "more than 1048576 hosts",
		"a[0-999999999999999999]b[0-999999999999999999]":        "more than 1048576 hosts",
		"a[0-524287,0-524287,0-1]":                              "more than 1048576 hosts",
		"a[0-999999999999999999,0-999999999999999999],b[0-9]":   "more than 1048576 hosts",
		"a[0-1],b[0-1],c[0-1023]d[0-1023]":                      "more than 1048576 hosts",
		"a[0-999999999999999999]b[0-999999999999999999]c[0-1]d": "more than 1048576 hosts",
	}
	for in, want := range cases {
		got, err := ExpandHostList(in)
		if err == nil {
			t.Errorf("ExpandHostList(%q) = %d names, want an error", in, len(got))
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "host list") {
			t.Errorf("ExpandHostList(%q): %q, want it to say %q", in, err, want)
		}
	}
}

// TestExpandHostListCap checks that the cap itself is allowed.
func TestExpandHostListCap(t *testing.T) {
	got, err := ExpandHostList("n[0-1023]r[0001-1024]")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != maxHostListLen || got[0] != "n0r0001" || got[1] != "n0r0002" || got[len(got)-1] != "n1023r1024" {
		t.Errorf("%d names, first %q %q, last %q", len(got), got[0], got[1], got[len(got)-1])
	}
}
