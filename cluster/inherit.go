package cluster

import (
	"fmt"
	"net"
	"os"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
)

// Inherited socket file descriptors (LocalSpec's children).
const (
	fdGossipTCP = 3
	fdGossipUDP = 4
	fdData      = 5 // the UDP socket (quic, quic-only) or the TCP listener (tcp)
	fdDataTCP   = 6 // network quic: the TCP listener of its TLS lane
)

// IsLocalChild reports whether this process was started by StartLocal
// (its launcher sockets are on file descriptors 3 to 5, or 6).
func IsLocalChild() bool { return os.Getenv(launchenv.EnvLauncherSockets) == "1" }

// LauncherSockets returns the sockets a local job's launcher handed this
// process (file descriptors 3, 4, 5 and, for network "quic", 6), for
// network "quic", "quic-only" or "tcp". It is
// called only when the environment says they are there
// (HIERCOMM_LAUNCHER_SOCKETS=1).
func LauncherSockets(network string) (Sockets, DataSocket, error) {
	file := func(fd int, what string) (*os.File, error) {
		f := os.NewFile(uintptr(fd), what)
		if f == nil {
			return nil, fmt.Errorf("cluster: file descriptor %d (%s from the launcher) is not open; was this process started by `hiercomm run`?", fd, what)
		}
		return f, nil
	}
	var g Sockets
	var d DataSocket
	fail := func(err error) (Sockets, DataSocket, error) {
		g.Close()
		d.Close()
		return Sockets{}, DataSocket{}, err
	}
	f, err := file(fdGossipTCP, "gossip TCP socket")
	if err != nil {
		return fail(err)
	}
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return fail(fmt.Errorf("cluster: fd %d is not the launcher's gossip TCP socket: %w", fdGossipTCP, err))
	}
	var ok bool
	if g.TCP, ok = ln.(*net.TCPListener); !ok {
		ln.Close()
		return fail(fmt.Errorf("cluster: fd %d is not a TCP listener", fdGossipTCP))
	}
	if f, err = file(fdGossipUDP, "gossip UDP socket"); err != nil {
		return fail(err)
	}
	pc, err := net.FilePacketConn(f)
	f.Close()
	if err != nil {
		return fail(fmt.Errorf("cluster: fd %d is not the launcher's gossip UDP socket: %w", fdGossipUDP, err))
	}
	if g.UDP, ok = pc.(*net.UDPConn); !ok {
		pc.Close()
		return fail(fmt.Errorf("cluster: fd %d is not a UDP socket", fdGossipUDP))
	}
	if f, err = file(fdData, "data socket"); err != nil {
		return fail(err)
	}
	defer f.Close()
	switch network {
	case "quic", "quic-only":
		if d.Packet, err = net.FilePacketConn(f); err != nil {
			return fail(fmt.Errorf("cluster: fd %d is not the launcher's UDP data socket (network %s): %w", fdData, network, err))
		}
		d.Addr = d.Packet.LocalAddr().String()
		if network == "quic-only" {
			break
		}
		ft, err := file(fdDataTCP, "data TCP socket")
		if err != nil {
			return fail(err)
		}
		d.Listener, err = net.FileListener(ft)
		ft.Close()
		if err != nil {
			return fail(fmt.Errorf("cluster: fd %d is not the launcher's TCP data socket (network quic, its TLS lane): %w", fdDataTCP, err))
		}
	case "tcp":
		if d.Listener, err = net.FileListener(f); err != nil {
			return fail(fmt.Errorf("cluster: fd %d is not the launcher's TCP data socket (network tcp): %w", fdData, err))
		}
		d.Addr = d.Listener.Addr().String()
	default:
		return fail(fmt.Errorf("cluster: network %q, want %s", network, launchenv.NetworkNames))
	}
	return g, d, nil
}
