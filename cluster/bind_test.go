package cluster

import (
	"errors"
	"net"
	"testing"
)

func TestSeedIPHere(t *testing.T) {
	ifaces := []Iface{
		{Name: "lo", Up: true, Loopback: true, Addrs: []net.IP{net.IPv4(127, 0, 0, 1)}},
		{Name: "eth0", Up: true, Addrs: []net.IP{net.IPv4(10, 0, 0, 5)}},
		{Name: "ib0", Up: false, Addrs: []net.IP{net.IPv4(10, 1, 0, 5)}},
	}
	lookup := func(host string) ([]net.IP, error) {
		switch host {
		case "node1":
			return []net.IP{net.IPv4(10, 0, 0, 5)}, nil
		case "node2":
			return []net.IP{net.IPv4(10, 0, 0, 6)}, nil
		}
		return nil, errors.New("no such host")
	}
	for _, tc := range []struct {
		seeds []string
		port  int
		want  string
	}{
		{[]string{"node1:29500"}, 29500, "10.0.0.5"},      // MASTER_ADDR is this host's eth0
		{[]string{"127.0.0.1:29500"}, 29500, "127.0.0.1"}, // torchrun's default master address
		{[]string{"node2:29500"}, 29500, ""},              // the seed is another host
		{[]string{"node1:29501"}, 29500, ""},              // another port: not this process's seed
		{[]string{"node1:29500"}, 0, ""},                  // this process binds no seed port
		{[]string{"10.1.0.5:29500"}, 29500, ""},           // an interface that is down
		{[]string{"nowhere:29500", "node1:29500"}, 29500, "10.0.0.5"},
	} {
		if got := seedIPHere(tc.seeds, tc.port, ifaces, lookup); got != tc.want {
			t.Errorf("seeds %v port %d: got %q, want %q", tc.seeds, tc.port, got, tc.want)
		}
	}
}
