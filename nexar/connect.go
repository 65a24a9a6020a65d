package nexar

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Config joins one rank to a world over a network.
type Config struct {
	// Net says where the ranks are and how they authenticate.
	Net NetConfig
	// Network is "quic" or "tcp". If empty, defaults to "quic".
	Network string
	// Options tune the collectives.
	Options
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
	var tr Transport
	switch cfg.Network {
	case "", "quic":
		tr, err = NewQUIC(ctx, cfg.Net, w)
	case "tcp":
		tr, err = NewTCP(ctx, cfg.Net, w)
	default:
		return nil, fmt.Errorf("nexar.Connect: unknown network %q (want quic or tcp)", cfg.Network)
	}
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

// NewLocalWorld returns n communicators, one per rank, joined over real
// QUIC or TCP on 127.0.0.1 inside this process (tests, examples). Close them
// together with CloseAll.
func NewLocalWorld(ctx context.Context, n int, network string, opt Options) ([]*Comm, error) {
	if n < 1 {
		return nil, fmt.Errorf("nexar.NewLocalWorld: n = %d, want ≥ 1", n)
	}
	if network == "" {
		network = "quic"
	}
	sock, err := socketNetwork(network)
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

// socketNetwork is the socket type a transport network runs on.
func socketNetwork(network string) (string, error) {
	switch network {
	case "quic":
		return "udp", nil
	case "tcp":
		return "tcp", nil
	}
	return "", fmt.Errorf("nexar: unknown network %q (want quic or tcp)", network)
}
