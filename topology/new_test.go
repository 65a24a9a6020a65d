package topology

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestNewErrors(t *testing.T) {
	withAddr := func(m Member, addr string) Member { m.Addr = addr; return m }
	for _, c := range []struct {
		name    string
		members []Member
		want    []string // substrings of the message
	}{
		{"no members", nil, []string{"no members"}},
		{"empty host", []Member{mem(0, "a", 0), {Rank: 1, Local: 0, Device: -1, Name: "lost"}},
			[]string{`member "lost"`, "no host id"}},
		{"negative local", []Member{mem(0, "a", 0), {Rank: 1, Host: "a", Local: -1, Device: 0, Name: "neg"}},
			[]string{`member "neg"`, `host "a"`, "local index -1"}},
		{"device below -1", []Member{mem(0, "a", 0), {Rank: 1, Host: "a", Local: 1, Device: -2, Name: "dev"}},
			[]string{`member "dev"`, "device -2", "-1 for none"}},
		{"rank below -1", []Member{mem(0, "a", 0), mem(-3, "a", 1)},
			[]string{`member "a-1"`, "rank -3"}},
		{"mixed given and assigned ranks", []Member{mem(0, "a", 0), mem(-1, "a", 1), mem(2, "b", 0)},
			[]string{`member "a-0"`, `member "a-1"`, "gives a rank", "every one gives -1"}},
		{"duplicate rank", []Member{mem(0, "a", 0), mem(1, "a", 1), mem(1, "b", 0), mem(3, "b", 1)},
			[]string{`member "a-1" (host "a", local 1, rank 1)`, `member "b-0" (host "b", local 0, rank 1)`, "both have rank 1"}},
		{"rank out of range", []Member{mem(0, "a", 0), mem(1, "a", 1), mem(4, "b", 0), mem(3, "b", 1)},
			[]string{`member "b-0"`, "rank 4", "[0, 4)"}},
		{"duplicate host and local", []Member{mem(0, "a", 0), mem(1, "a", 1), {Rank: 2, Host: "a", Local: 1, Device: 5, Name: "twin"}},
			[]string{`member "a-1"`, `member "twin"`, "same host and local index"}},
		{"duplicate host and local, assigned", []Member{mem(-1, "a", 0), mem(-1, "a", 0)},
			[]string{`member "a-0" (host "a", local 0, no rank)`, "same host and local index"}},
		{"missing local index", []Member{mem(0, "h", 0), mem(1, "h", 1), mem(2, "h", 3), mem(3, "g", 0)},
			[]string{`host "h" has local indices 0, 1, 3: 2 is missing`}},
		{"missing local 0", []Member{mem(-1, "h", 1), mem(-1, "h", 2)},
			[]string{`host "h" has local indices 1, 2: 0 is missing`}},
		{"duplicate addr", []Member{withAddr(mem(0, "a", 0), "10.0.0.1:4000"), withAddr(mem(1, "b", 0), "10.0.0.1:4000")},
			[]string{`member "a-0"`, `member "b-0"`, "both have address 10.0.0.1:4000"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.members)
			if err == nil {
				t.Fatalf("New(%v) succeeded, want an error", c.members)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "topology: ") {
				t.Errorf("error %q does not start with \"topology: \"", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			// Every process must report the same error for the same set.
			rng := rand.New(rand.NewPCG(3, 4))
			for range 10 {
				ms := slices.Clone(c.members)
				rng.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
				_, err := New(ms)
				if err == nil || err.Error() != msg {
					t.Fatalf("New(%v) = %v, want the same error as New(%v): %s", ms, err, c.members, msg)
				}
			}
		})
	}
}

func TestMissingLocalIndicesElided(t *testing.T) {
	var ms []Member
	for l := range 40 {
		if l != 30 {
			ms = append(ms, mem(-1, "big", l))
		}
	}
	_, err := New(ms)
	if err == nil {
		t.Fatal("New succeeded with local index 30 missing")
	}
	want := `host "big" has local indices 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, ..., 39: 30 is missing`
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not contain %q", err, want)
	}
}

func TestCompareHosts(t *testing.T) {
	// Each pair is in strictly increasing natural order.
	for _, c := range [][2]string{
		{"node-2", "node-10"},
		{"gpu9", "gpu10"},
		{"gpu09", "gpu10"},
		{"a", "b"},
		{"n", "n1"},
		{"n1", "n1a"},
		{"n1x", "n1y"},
		{"n1", "na"},      // a digit sorts before a letter, as in bytes
		{"n-", "n1"},      // and after '-'
		{"9a", "10"},      // 9 < 10
		{"n02", "n2"},     // equal in value: bytewise, so the order is total
		{"r1s10", "r2s1"}, // the first number decides
		{"r1s2", "r1s10"},
		{"x99999999999999999999998", "x99999999999999999999999"}, // beyond int64
		{"", "a"},
	} {
		if got := compareHosts(c[0], c[1]); got != -1 {
			t.Errorf("compareHosts(%q, %q) = %d, want -1", c[0], c[1], got)
		}
		if got := compareHosts(c[1], c[0]); got != 1 {
			t.Errorf("compareHosts(%q, %q) = %d, want 1", c[1], c[0], got)
		}
	}
	if got := compareHosts("node-7", "node-7"); got != 0 {
		t.Errorf("compareHosts of equal ids = %d", got)
	}
}

// TestCompareHostsIsAnOrder checks antisymmetry and transitivity over every
// triple of a set of awkward ids, so that sorting by it is deterministic.
func TestCompareHostsIsAnOrder(t *testing.T) {
	ids := []string{"", "0", "00", "1", "01", "10", "9", "a", "a0", "a00", "a1", "a01", "a10", "a9", "a9b",
		"a10b", "ab", "a-1", "a.1", "a/1", "a:1", "b", "node-2", "node-10", "node-02", "n1s2", "n1s10", "n01s3", "z"}
	for _, x := range ids {
		for _, y := range ids {
			xy, yx := compareHosts(x, y), compareHosts(y, x)
			if xy != -yx || (xy == 0) != (x == y) {
				t.Fatalf("compareHosts(%q, %q) = %d, compareHosts(%q, %q) = %d", x, y, xy, y, x, yx)
			}
			for _, z := range ids {
				if xy < 0 && compareHosts(y, z) < 0 && compareHosts(x, z) >= 0 {
					t.Fatalf("%q < %q < %q but compareHosts(%q, %q) = %d", x, y, z, x, z, compareHosts(x, z))
				}
			}
		}
	}
}

// Survivors renumbers ranks in order and local ranks within each host,
// and drops a host none survives on.
func TestSurvivors(t *testing.T) {
	var ms []Member
	for n, host := range []string{"a", "b", "c"} {
		for l := range 3 {
			ms = append(ms, Member{Rank: 3*n + l, Host: host, Local: l, Device: -1})
		}
	}
	top, err := New(ms)
	if err != nil {
		t.Fatal(err)
	}
	s, err := top.Survivors([]int{0, 2, 6, 7, 8})
	if err != nil {
		t.Fatal(err)
	}
	if s.Size() != 5 || s.NumNodes() != 2 {
		t.Fatalf("%d ranks on %d nodes, want 5 on 2", s.Size(), s.NumNodes())
	}
	for r, want := range []struct {
		host  string
		local int
	}{{"a", 0}, {"a", 1}, {"c", 0}, {"c", 1}, {"c", 2}} {
		if m := s.Member(r); m.Host != want.host || m.Local != want.local {
			t.Errorf("rank %d: host %s local %d, want %s %d", r, m.Host, m.Local, want.host, want.local)
		}
	}
	for _, bad := range [][]int{nil, {1, 1}, {2, 1}, {9}, {-1}} {
		if _, err := top.Survivors(bad); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}
