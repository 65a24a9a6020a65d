package netmesh

import (
	"context"
	"fmt"

	"github.com/hiercomm/hiercomm/nexar/transport"
)

// New joins the mesh over the network named network (nexar.Config.Network;
// empty is "quic"): NewLanes, NewQUIC or NewTCP.
func New(ctx context.Context, network string, cfg Config, h transport.Handler) (transport.Transport, error) {
	switch network {
	case "", "quic":
		return NewLanes(ctx, cfg, h)
	case "quic-only":
		return NewQUIC(ctx, cfg, h)
	case "tcp":
		return NewTCP(ctx, cfg, h)
	}
	if cfg.PacketConn != nil {
		cfg.PacketConn.Close()
	}
	if cfg.Listener != nil {
		cfg.Listener.Close()
	}
	return nil, fmt.Errorf("nexar: unknown network %q (want %s)", network, Networks)
}

// Networks lists the names of nexar.Config.Network, for messages.
const Networks = "quic, quic-only or tcp"

// SocketNetwork is the kind of socket a network (nexar.Config.Network) runs on,
// as LocalConfigs names it: "udp+tcp" for "quic" (both lanes, on one
// port), "udp" for "quic-only", "tcp" for "tcp".
func SocketNetwork(network string) (string, error) {
	switch network {
	case "quic":
		return "udp+tcp", nil
	case "quic-only":
		return "udp", nil
	case "tcp":
		return "tcp", nil
	}
	return "", fmt.Errorf("nexar: unknown network %q (want %s)", network, Networks)
}
