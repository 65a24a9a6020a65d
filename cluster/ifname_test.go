package cluster

import (
	"net"
	"runtime"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
)

// ips parses addresses for test interfaces.
func ips(s ...string) []net.IP {
	var out []net.IP
	for _, a := range s {
		ip := net.ParseIP(a)
		if ip == nil {
			panic("bad test address " + a)
		}
		out = append(out, ip)
	}
	return out
}

func TestIfaceSelectAddr(t *testing.T) {
	lo := Iface{Name: "lo", Up: true, Loopback: true, Addrs: ips("127.0.0.1", "::1")}
	docker := Iface{Name: "docker0", Up: true, Addrs: ips("172.17.0.1")}
	eth0v6 := Iface{Name: "eth0", Up: true, Addrs: ips("fe80::1", "2001:db8::5")}
	eth1 := Iface{Name: "eth1", Up: true, Addrs: ips("fe80::2", "10.0.0.5")}
	ib0Down := Iface{Name: "ib0", Up: false, Addrs: ips("192.168.1.5")}
	ib1 := Iface{Name: "ib1", Up: true, Addrs: ips("192.168.2.5")}
	linkLocal := Iface{Name: "eth2", Up: true, Addrs: ips("fe80::3", "169.254.1.1")}
	noAddr := Iface{Name: "eth3", Up: true}
	all := []Iface{lo, docker, eth0v6, eth1, ib0Down, ib1}

	cases := []struct {
		name   string
		spec   string
		ifaces []Iface
		ip     string
		iface  string
	}{
		{"default prefers IPv4 over an earlier IPv6-only interface", "", all, "10.0.0.5", "eth1"},
		{"default takes global IPv6 when no IPv4", "", []Iface{lo, docker, eth0v6}, "2001:db8::5", "eth0"},
		{"default falls back to loopback", "", []Iface{docker, lo, linkLocal, noAddr}, "127.0.0.1", "lo"},
		{"default skips docker even when it is all there is besides lo", "", []Iface{docker, lo}, "127.0.0.1", "lo"},
		{"default skips a loopback whatever its name", "", []Iface{{Name: "lback", Up: true, Loopback: true, Addrs: ips("127.0.0.2")}, eth1}, "10.0.0.5", "eth1"},
		{"IPv4 first within an interface", "", []Iface{{Name: "en0", Up: true, Addrs: ips("2001:db8::9", "10.1.1.1")}}, "10.1.1.1", "en0"},
		{"IPv4 in 16-byte form comes back as 4 bytes", "", []Iface{{Name: "en0", Up: true, Addrs: []net.IP{net.IPv4(10, 2, 2, 2)}}}, "10.2.2.2", "en0"},
		{"prefix skips a down interface", "ib", all, "192.168.2.5", "ib1"},
		{"prefix, several", "ib,eth", all, "10.0.0.5", "eth1"},
		{"exact", "=ib1", all, "192.168.2.5", "ib1"},
		{"exact IPv6 only", "=eth0", all, "2001:db8::5", "eth0"},
		{"exclude list replaces the default's", "^eth,ib", all, "127.0.0.1", "lo"},
		{"exclude with lo", "^lo,eth", all, "172.17.0.1", "docker0"},
		{"exclude exact", "^=lo,docker0,eth1", all, "192.168.2.5", "ib1"},
		{"exclude exact leaves IPv6 only", "^=lo,docker0,eth1,ib1", all, "2001:db8::5", "eth0"},
		{"loopback by name", "lo", all, "127.0.0.1", "lo"},
		{"loopback IPv6 only", "=lo", []Iface{{Name: "lo", Up: true, Loopback: true, Addrs: ips("::1")}}, "::1", "lo"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := launchenv.ParseIfSpec(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			ip, name, err := SelectAddr(spec, tc.ifaces)
			if err != nil {
				t.Fatalf("SelectAddr: %v", err)
			}
			if !ip.Equal(net.ParseIP(tc.ip)) || name != tc.iface {
				t.Errorf("SelectAddr = %v on %s, want %s on %s", ip, name, tc.ip, tc.iface)
			}
			if want4 := net.ParseIP(tc.ip).To4() != nil; want4 && len(ip) != net.IPv4len {
				t.Errorf("IPv4 result has %d bytes", len(ip))
			}
			ip[len(ip)-1]++ // the result is the caller's, not a view of the input
			if ip2, _, _ := SelectAddr(spec, tc.ifaces); !ip2.Equal(net.ParseIP(tc.ip)) {
				t.Error("SelectAddr returned a slice of its input")
			}
		})
	}
}

func TestIfaceSelectAddrErrors(t *testing.T) {
	lo := Iface{Name: "lo", Up: true, Loopback: true, Addrs: ips("127.0.0.1")}
	eth0 := Iface{Name: "eth0", Up: true, Addrs: ips("10.0.0.5")}

	// The message as the spec of hiercomm shows it, to the letter.
	spec, _ := launchenv.ParseIfSpec("ib")
	spec.Source = "HIERCOMM_SOCKET_IFNAME"
	_, _, err := SelectAddr(spec, []Iface{lo, eth0})
	want := `no interface matches HIERCOMM_SOCKET_IFNAME="ib": here: lo (127.0.0.1), eth0 (10.0.0.5)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v\ndoes not contain %q", err, want)
	}

	cases := []struct {
		name   string
		spec   string
		ifaces []Iface
		want   []string
	}{
		{"nothing matches", "=ib0", []Iface{lo, eth0, {Name: "ib1", Addrs: ips("10.9.9.9")}},
			[]string{`no interface matches interface spec="=ib0"`, "ib1 (down, 10.9.9.9)"}},
		{"matches but down", "ib", []Iface{lo, {Name: "ib0", Addrs: ips("10.9.9.9")}},
			[]string{`interfaces match interface spec="ib" but none is up`, "ib0 (down, 10.9.9.9)"}},
		{"matches but no address", "eth", []Iface{lo, {Name: "eth1", Up: true}},
			[]string{"but none is up with a usable", "eth1 (no address)"}},
		{"matches but link-local only", "eth", []Iface{lo, {Name: "eth1", Up: true, Addrs: ips("fe80::1", "169.254.0.9")}},
			[]string{"but none is up with a usable", "eth1 (fe80::1, 169.254.0.9)"}},
		{"default, no loopback up", "", []Iface{{Name: "lo", Loopback: true, Addrs: ips("127.0.0.1")}, {Name: "docker0", Up: true, Addrs: ips("172.17.0.1")}},
			[]string{"no interface is up with a usable address", "lo (down, 127.0.0.1), docker0 (172.17.0.1)"}},
		{"no interfaces at all", "", nil, []string{"here: none"}},
		{"loopback address on a non-loopback interface", "=eth9", []Iface{{Name: "eth9", Up: true, Addrs: ips("127.0.0.5")}},
			[]string{"but none is up with a usable"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := launchenv.ParseIfSpec(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			ip, name, err := SelectAddr(spec, tc.ifaces)
			if err == nil {
				t.Fatalf("SelectAddr = %v on %s, want an error", ip, name)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

func TestSystemIfaces(t *testing.T) {
	ifaces, err := SystemIfaces()
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "linux" {
		return
	}
	// Every Linux network namespace has lo with 127.0.0.1.
	for _, f := range ifaces {
		if f.Loopback {
			for _, a := range f.Addrs {
				if a.Equal(net.IPv4(127, 0, 0, 1)) {
					ip, _, err := SelectAddr(launchenv.IfSpec{}, ifaces)
					if err != nil || ip == nil {
						t.Errorf("SelectAddr(default) on this machine: %v, %v", ip, err)
					}
					return
				}
			}
		}
	}
	t.Errorf("no loopback interface with 127.0.0.1 among %+v", ifaces)
}
