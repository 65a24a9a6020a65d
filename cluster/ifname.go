package cluster

import (
	"fmt"
	"net"
	"strings"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
)

// Iface is a network interface as SelectAddr sees it.
type Iface struct {
	Name     string
	Up       bool // administratively up
	Loopback bool
	Addrs    []net.IP
}

// SystemIfaces returns this machine's interfaces in the kernel's order,
// with their IP addresses.
func SystemIfaces() ([]Iface, error) {
	nifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("cluster: listing network interfaces: %w", err)
	}
	ifaces := make([]Iface, 0, len(nifs))
	for _, ni := range nifs {
		addrs, err := ni.Addrs()
		if err != nil {
			return nil, fmt.Errorf("cluster: addresses of interface %s: %w", ni.Name, err)
		}
		ifc := Iface{Name: ni.Name, Up: ni.Flags&net.FlagUp != 0, Loopback: ni.Flags&net.FlagLoopback != 0}
		for _, a := range addrs {
			switch a := a.(type) {
			case *net.IPNet:
				ifc.Addrs = append(ifc.Addrs, a.IP)
			case *net.IPAddr:
				ifc.Addrs = append(ifc.Addrs, a.IP)
			}
		}
		ifaces = append(ifaces, ifc)
	}
	return ifaces, nil
}

// SelectAddr returns the address to bind and advertise: the first up
// interface, in the order of ifaces, that spec selects and that has an
// IPv4 address (not link-local); failing that, the first with a global
// IPv6 address. Link-local addresses are never chosen: they need a zone
// and do not route between nodes.
//
// For the default spec, loopback interfaces are skipped at first; if no
// other interface has a usable address, SelectAddr returns a loopback
// address without error. That is a world confined to this machine: the
// caller should warn when spec.IsDefault() and ip.IsLoopback(). A spec that
// names loopback (e.g. "lo") selects it like any other interface.
//
// The error lists every interface with its state and addresses, so the
// message alone says what to set.
func SelectAddr(spec launchenv.IfSpec, ifaces []Iface) (ip net.IP, iface string, err error) {
	primary := func(f Iface) bool { return spec.Matches(f.Name) && !(spec.IsDefault() && f.Loopback) }
	if ip, name := pick(ifaces, primary); ip != nil {
		return ip, name, nil
	}
	if spec.IsDefault() {
		if ip, name := pick(ifaces, func(f Iface) bool { return f.Loopback }); ip != nil {
			return ip, name, nil
		}
	}
	return nil, "", selectError(spec, ifaces, primary)
}

// pick returns the preferred address among the up interfaces that ok
// accepts: IPv4 on any of them first, then IPv6.
func pick(ifaces []Iface, ok func(Iface) bool) (net.IP, string) {
	for _, want4 := range []bool{true, false} {
		for _, f := range ifaces {
			if !f.Up || !ok(f) {
				continue
			}
			for _, a := range f.Addrs {
				if usable(a, f.Loopback) && (a.To4() != nil) == want4 {
					return cloneIP(a), f.Name
				}
			}
		}
	}
	return nil, ""
}

// usable reports whether a can be bound and reached: IPv4 or global IPv6,
// not link-local, not unspecified; loopback only on a loopback interface.
func usable(a net.IP, loopback bool) bool {
	switch {
	case a == nil || a.IsUnspecified() || a.IsLinkLocalUnicast() || a.IsMulticast():
		return false
	case a.IsLoopback():
		return loopback
	case a.To4() != nil:
		return true
	default:
		return a.IsGlobalUnicast()
	}
}

func cloneIP(a net.IP) net.IP {
	if a4 := a.To4(); a4 != nil {
		a = a4
	}
	return append(net.IP(nil), a...)
}

// selectError explains why SelectAddr found nothing.
func selectError(spec launchenv.IfSpec, ifaces []Iface, primary func(Iface) bool) error {
	src := spec.Source
	if src == "" {
		src = "interface spec"
	}
	var here []string
	matched := false
	for _, f := range ifaces {
		var notes []string
		if !f.Up {
			notes = append(notes, "down")
		}
		for _, a := range f.Addrs {
			notes = append(notes, a.String())
		}
		if len(f.Addrs) == 0 {
			notes = append(notes, "no address")
		}
		here = append(here, fmt.Sprintf("%s (%s)", f.Name, strings.Join(notes, ", ")))
		matched = matched || primary(f)
	}
	list := "none"
	if len(here) > 0 {
		list = strings.Join(here, ", ")
	}
	switch {
	case spec.IsDefault():
		return fmt.Errorf("cluster: no interface is up with a usable address (by default docker* and lo* are skipped, then loopback is tried): here: %s; bring one up, or set %s to choose", list, src)
	case matched:
		return fmt.Errorf("cluster: interfaces match %s=%q but none is up with a usable IPv4 or global IPv6 address: here: %s; bring one up or change %s", src, spec.String(), list, src)
	default:
		return fmt.Errorf("cluster: no interface matches %s=%q: here: %s; set %s to one of them (a prefix such as \"eth\", or \"=name\" for one exactly)", src, spec.String(), list, src)
	}
}
