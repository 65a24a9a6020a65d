package cluster

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
)

// Bind returns this process's gossip and data sockets for a resolved
// launch (launchenv.Launch.Resolve): the ones the local launcher handed
// over (Inherited), or new ones on the address the launch names (Addr) or
// interface selection picks (IfSpec, or the address a seed names when it
// is this machine's).
// Progress and warnings go to log. Bind is the one place that chooses an
// interface and binds the sockets Join and the data plane use.
func Bind(l launchenv.Launch, log *slog.Logger) (Sockets, DataSocket, error) {
	if l.Inherited {
		return LauncherSockets(l.Network)
	}
	ip, err := chooseIP(l, log)
	if err != nil {
		return Sockets{}, DataSocket{}, err
	}
	port := l.GossipPort
	if l.Joining {
		// The seed's port, where the launch names one: a process that
		// joins a running job is never its seed, and the seed holds it.
		port = 0
	}
	gossip, err := BindGossip(ip, port)
	if err != nil {
		return Sockets{}, DataSocket{}, err
	}
	data, err := BindData(l.Network, ip, 0)
	if err != nil {
		gossip.Close()
		return Sockets{}, DataSocket{}, err
	}
	return gossip, data, nil
}

// chooseIP is the address this process binds and announces: the launch's
// Addr (an IP or a host name), or the interface selection's pick.
func chooseIP(l launchenv.Launch, log *slog.Logger) (string, error) {
	if l.Addr != "" {
		if ip := net.ParseIP(l.Addr); ip != nil {
			return ip.String(), nil
		}
		ips, err := net.LookupIP(l.Addr)
		if err != nil || len(ips) == 0 {
			return "", fmt.Errorf("address %q (%s) does not resolve: %v", l.Addr, launchenv.EnvAddr, err)
		}
		return ips[0].String(), nil
	}
	spec, err := l.IfaceSpec()
	if err != nil {
		return "", err
	}
	ifaces, err := SystemIfaces()
	if err != nil {
		return "", fmt.Errorf("listing network interfaces: %w", err)
	}
	// The seed process must listen where the seeds point (MASTER_ADDR, the
	// first Slurm host): if a seed on this process's port resolves to an
	// address of this machine, that address wins over interface selection.
	if ip := seedIPHere(l.Seeds, l.GossipPort, ifaces, net.LookupIP); ip != "" {
		log.Debug("cluster: binding the seed address", "ip", ip)
		return ip, nil
	}
	ip, name, err := SelectAddr(spec, ifaces)
	if err != nil {
		return "", err
	}
	if spec.IsDefault() && ip.IsLoopback() {
		log.Warn("cluster: no network interface but loopback is up; other hosts cannot reach this process (set "+launchenv.EnvSocketIfname+" or "+launchenv.EnvAddr+" on a multi-host job)",
			"interface", name, "ip", ip.String())
	}
	log.Debug("cluster: interface chosen", "interface", name, "ip", ip.String(), "spec", spec.String())
	return ip.String(), nil
}

// seedIPHere returns the address of this machine that a seed with port
// names, or "" when this process binds no seed port or no seed is here.
func seedIPHere(seeds []string, port int, ifaces []Iface, lookup func(string) ([]net.IP, error)) string {
	if port == 0 {
		return ""
	}
	for _, s := range seeds {
		host, p, err := net.SplitHostPort(s)
		if err != nil || p != strconv.Itoa(port) {
			continue
		}
		ips := []net.IP{net.ParseIP(host)}
		if ips[0] == nil {
			if ips, err = lookup(host); err != nil {
				continue
			}
		}
		for _, ip := range ips {
			for _, ifc := range ifaces {
				if !ifc.Up {
					continue
				}
				for _, a := range ifc.Addrs {
					if a.Equal(ip) {
						return ip.String()
					}
				}
			}
		}
	}
	return ""
}
