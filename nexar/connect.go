package nexar

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hiercomm/hiercomm/comm/tier"
)

// Config joins one rank to a world over a network.
type Config struct {
	// Net says where the ranks are and how they authenticate.
	Net NetConfig
	// Network is "quic" (QUIC, with a TLS-over-TCP lane for large
	// frames: NewLanes; it needs Net.PacketConn and Net.Listener, or both
	// UDP and TCP free on every address), "quic-only" (QUIC alone: NewQUIC,
	// for networks that pass only UDP or need QUIC's connection migration)
	// or "tcp" (plain TCP, for trusted fabrics: NewTCP). If empty, defaults
	// to "quic".
	Network string
	// Options tune the collectives.
	Options
}

// Timeouts are the bounds a world Connect makes with c keeps, in the
// vocabulary every tier shares: Options.Timeout, Net.FailureTimeout and
// Net.ConnectTimeout, each zero one at its default on the network.
func (c Config) Timeouts() tier.Timeouts {
	return tier.Timeouts{Timeout: c.Options.Timeout, FailureTimeout: c.Net.FailureTimeout, ConnectTimeout: c.Net.ConnectTimeout}.WithDefaults(tier.Network)
}

// Connect joins this rank to its world and returns the world communicator.
// It returns once connected to every peer, or fails within
// Net.ConnectTimeout (or ctx) naming the ranks still missing.
func Connect(ctx context.Context, cfg Config) (*Comm, error) {
	opt, err := cfg.Options.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Net.Logger == nil {
		cfg.Net.Logger = opt.Logger
	}
	w := newWorld(opt.Logger, cfg.Net.Rank, len(cfg.Net.Addrs))
	tr, err := NewNetwork(ctx, cfg.Network, cfg.Net, w)
	if err != nil {
		return nil, err
	}
	w.attach(tr)
	c, err := newWorldComm(w, opt)
	if err != nil {
		tr.Close()
		return nil, err
	}
	return c, nil
}

// NewNetwork joins the mesh over the network named network (Config.Network;
// empty is "quic"): NewLanes, NewQUIC or NewTCP.
func NewNetwork(ctx context.Context, network string, cfg NetConfig, h Handler) (Transport, error) {
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

// NewLocalWorld returns n communicators, one per rank, joined over a real
// network (Config.Network: quic, quic-only or tcp) on 127.0.0.1 inside this process (tests, examples). Close them
// together with CloseAll.
func NewLocalWorld(ctx context.Context, n int, network string, opt Options) ([]*Comm, error) {
	if n < 1 {
		return nil, fmt.Errorf("nexar.NewLocalWorld: n = %d, want ≥ 1", n)
	}
	if network == "" {
		network = "quic"
	}
	sock, err := SocketNetwork(network)
	if err != nil {
		return nil, err
	}
	cfgs, err := LocalConfigs(sock, n, NetConfig{JobKey: []byte("hiercomm-local-world-in-process!"), JobID: "local-in-process"})
	if err != nil {
		return nil, err
	}
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[i], errs[i] = Connect(ctx, Config{Net: cfgs[i], Network: network, Options: opt})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		CloseAll(comms)
		return nil, err
	}
	return comms, nil
}

// Networks lists the names of Config.Network, for messages.
const Networks = "quic, quic-only or tcp"

// SocketNetwork is the kind of socket a network (Config.Network) runs on,
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
