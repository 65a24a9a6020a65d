package nexar

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/nexar/transport"
	"github.com/hiercomm/hiercomm/nexar/transport/netmesh"
)

// NetConfig says where the ranks of a network world are and how they
// authenticate: the configuration of the network transports
// (nexar/transport/netmesh), named here because Config holds it.
type NetConfig = netmesh.Config

// Config joins one rank to a world over a network.
type Config struct {
	// Net says where the ranks are and how they authenticate.
	Net NetConfig
	// Network is "quic" (QUIC, with a TLS-over-TCP lane for large
	// frames: netmesh.NewLanes; it needs Net.PacketConn and Net.Listener,
	// or both UDP and TCP free on every address), "quic-only" (QUIC
	// alone: netmesh.NewQUIC, for networks that pass only UDP or need
	// QUIC's connection migration) or "tcp" (plain TCP, for trusted
	// fabrics: netmesh.NewTCP). If empty, defaults to "quic".
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
	return NewWorld(cfg.Net.Rank, len(cfg.Net.Addrs), opt, func(h transport.Handler) (transport.Transport, error) {
		return netmesh.New(ctx, cfg.Network, cfg.Net, h)
	})
}

// NewWorld returns the world communicator of rank rank of size over a
// transport that connect makes: connect is given the Handler its
// transport delivers to (from then on, possibly before connect returns)
// and returns the transport once it reaches every peer, or an error.
// Connect is NewWorld over the network transports; a transport of one's
// own backs a communicator the same way (nexar/transport says what it
// implements). The communicator owns the transport: its Close closes it.
func NewWorld(rank, size int, opt Options, connect func(transport.Handler) (transport.Transport, error)) (*Comm, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("nexar.NewWorld: rank %d of %d: want 0 ≤ rank < size: %w", rank, size, comm.ErrInvalidArgument)
	}
	w := newWorld(opt.Logger, rank, size)
	tr, err := connect(w)
	if err != nil {
		return nil, err
	}
	if tr.Rank() != rank || tr.Size() != size {
		tr.Close()
		return nil, fmt.Errorf("nexar.NewWorld: the transport is rank %d of %d, want rank %d of %d: %w", tr.Rank(), tr.Size(), rank, size, comm.ErrInvalidArgument)
	}
	w.attach(tr)
	c, err := newWorldComm(w, opt)
	if err != nil {
		tr.Close()
		return nil, err
	}
	return c, nil
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
	sock, err := netmesh.SocketNetwork(network)
	if err != nil {
		return nil, err
	}
	cfgs, err := netmesh.LocalConfigs(sock, n, NetConfig{JobKey: []byte("hiercomm-local-world-in-process!"), JobID: "local-in-process"})
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
