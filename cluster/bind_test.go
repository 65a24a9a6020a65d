package cluster

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
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

// TestLaunchIfaceSpecSource: the variable a Launch read its interface spec
// from is what SelectAddr's errors tell the user to set.
func TestLaunchIfaceSpecSource(t *testing.T) {
	sys := launchenv.Sys{Hostname: func() (string, error) { return "testhost", nil }}
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"NCCL_SOCKET_IFNAME": "ib"}, "NCCL_SOCKET_IFNAME"},
		{map[string]string{"HIERCOMM_SOCKET_IFNAME": "ib", "NCCL_SOCKET_IFNAME": "eth"}, "HIERCOMM_SOCKET_IFNAME"},
		{map[string]string{}, "HIERCOMM_SOCKET_IFNAME"}, // the default; the variable to set
	}
	for _, tc := range cases {
		l, err := launchenv.LoadLaunch(func(name string) string { return tc.env[name] }, sys)
		if err != nil {
			t.Fatal(err)
		}
		spec, err := l.IfaceSpec()
		if err != nil || spec.Source != tc.want {
			t.Errorf("env %v: IfaceSpec().Source = %q, %v; want %q", tc.env, spec.Source, err, tc.want)
		}
		// The error of a failed choice names the source.
		if _, _, err := SelectAddr(spec, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("env %v: SelectAddr error %v does not name %s", tc.env, err, tc.want)
		}
	}
	spec, err := launchenv.Launch{IfSpec: "=eth0"}.IfaceSpec()
	if err != nil || spec.Source != "IfSpec" || spec.String() != "=eth0" {
		t.Errorf("explicit: %+v, %v", spec, err)
	}
	if _, err := (launchenv.Launch{IfSpec: "^"}).IfaceSpec(); err == nil {
		t.Error("IfaceSpec accepted \"^\"")
	}
}
