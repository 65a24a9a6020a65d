package cluster

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
)

// Sockets are the bound gossip sockets of one process: a TCP listener and a
// UDP socket on the same IP and port (memberlist probes over UDP and syncs
// state over TCP, and advertises one address for both). They are bound
// before Join so that a launcher can bind them early and hand them to its
// children, and so that the interface choice is made once, by the caller.
type Sockets struct {
	TCP *net.TCPListener
	UDP *net.UDPConn
}

// maxBindAttempts bounds the retries of BindGossip with port 0: the kernel
// picks a free TCP port, and the same UDP port may be taken.
const maxBindAttempts = 64

// BindGossip binds a TCP listener and a UDP socket on ip and the same port.
// ip must be an IP address (the address the other members will reach this
// process at: the interface chosen by HIERCOMM_SOCKET_IFNAME), not a host
// name and not unspecified (0.0.0.0, ::). If port is 0 the kernel picks it,
// and BindGossip retries until the TCP and the UDP port agree.
func BindGossip(ip string, port int) (Sockets, error) {
	addr := net.ParseIP(ip)
	switch {
	case addr == nil:
		return Sockets{}, fmt.Errorf("cluster: BindGossip: %q is not an IP address (resolve a host name first)", ip)
	case addr.IsUnspecified():
		return Sockets{}, fmt.Errorf("cluster: BindGossip: %s is the unspecified address: bind the IP the other processes reach this one at (HIERCOMM_ADDR or HIERCOMM_SOCKET_IFNAME)", ip)
	case port < 0 || port > 65535:
		return Sockets{}, fmt.Errorf("cluster: BindGossip: port %d is not in [0, 65535]", port)
	}
	s, err := bindPair(addr, port)
	if err == nil {
		return s, nil
	}
	hint := ""
	if errors.Is(err, syscall.EADDRINUSE) && port != 0 {
		hint = ": another process holds the port; pick another (HIERCOMM_PORT) or stop that process"
	} else if errors.Is(err, syscall.EADDRNOTAVAIL) {
		hint = ": this host has no interface with that address; pick another (HIERCOMM_ADDR, HIERCOMM_SOCKET_IFNAME)"
	}
	return Sockets{}, fmt.Errorf("cluster: BindGossip %s: %w%s", net.JoinHostPort(ip, strconv.Itoa(port)), err, hint)
}

// bindPair binds a TCP listener and a UDP socket on ip and the same port,
// retrying (port 0) until the kernel's pick is free for both.
func bindPair(ip net.IP, port int) (Sockets, error) {
	attempts := 1
	if port == 0 {
		attempts = maxBindAttempts
	}
	var err error
	for range attempts {
		var s Sockets
		s, err = bindPairOnce(ip, port)
		if err == nil {
			return s, nil
		}
		if port != 0 || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return Sockets{}, err
}

func bindPairOnce(ip net.IP, port int) (Sockets, error) {
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		return Sockets{}, err
	}
	port = tcp.Addr().(*net.TCPAddr).Port
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: port})
	if err != nil {
		tcp.Close()
		return Sockets{}, err
	}
	return Sockets{TCP: tcp, UDP: udp}, nil
}

// Addr is the host:port both sockets are bound to, or "" if there is no TCP
// listener.
func (s Sockets) Addr() string {
	if s.TCP == nil {
		return ""
	}
	return s.TCP.Addr().String()
}

// Close closes both sockets; either may be nil.
func (s Sockets) Close() error {
	var errs []error
	if s.TCP != nil {
		errs = append(errs, s.TCP.Close())
	}
	if s.UDP != nil {
		errs = append(errs, s.UDP.Close())
	}
	return errors.Join(errs...)
}

// DataSocket is the bound data-plane socket of one process: a UDP socket
// for QUIC (Packet), a TCP listener (Listener), or both on the same port
// (network quic: QUIC and its TLS lane), and the address the other members
// dial (Addr, published in the member metadata).
type DataSocket struct {
	Packet   net.PacketConn
	Listener net.Listener
	Addr     string
}

// BindData binds the data-plane sockets for network "quic" (a UDP socket
// and a TCP listener on the same port), "quic-only" (a UDP socket) or
// "tcp" (a TCP listener) on ip and port; port 0 lets the kernel pick. ip
// must be an IP address; as for BindGossip, it is the address the other
// members reach this process at.
func BindData(network, ip string, port int) (DataSocket, error) {
	addr := net.ParseIP(ip)
	switch {
	case addr == nil:
		return DataSocket{}, fmt.Errorf("cluster: BindData: %q is not an IP address (resolve a host name first)", ip)
	case addr.IsUnspecified():
		return DataSocket{}, fmt.Errorf("cluster: BindData: %s is the unspecified address: bind the IP the other processes reach this one at", ip)
	case port < 0 || port > 65535:
		return DataSocket{}, fmt.Errorf("cluster: BindData: port %d is not in [0, 65535]", port)
	}
	switch network {
	case "quic":
		s, err := bindPair(addr, port)
		if err != nil {
			return DataSocket{}, fmt.Errorf("cluster: BindData: %w", err)
		}
		return DataSocket{Packet: s.UDP, Listener: s.TCP, Addr: s.Addr()}, nil
	case "quic-only":
		pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: addr, Port: port})
		if err != nil {
			return DataSocket{}, fmt.Errorf("cluster: BindData: %w", err)
		}
		return DataSocket{Packet: pc, Addr: pc.LocalAddr().String()}, nil
	case "tcp":
		ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: addr, Port: port})
		if err != nil {
			return DataSocket{}, fmt.Errorf("cluster: BindData: %w", err)
		}
		return DataSocket{Listener: ln, Addr: ln.Addr().String()}, nil
	}
	return DataSocket{}, fmt.Errorf("cluster: BindData: network %q, want %s (HIERCOMM_NETWORK)", network, launchenv.NetworkNames)
}

// Close closes the socket.
func (d DataSocket) Close() error {
	var errs []error
	if d.Packet != nil {
		errs = append(errs, d.Packet.Close())
	}
	if d.Listener != nil {
		errs = append(errs, d.Listener.Close())
	}
	return errors.Join(errs...)
}
