package hiercomm

import (
	"cmp"
	"log/slog"

	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nexar"
)

// withDefaults returns a copy of opt in which each tier's config is filled
// where the user left it zero (see Options): the logger and the timeouts
// the tiers share. The parts Init wires are set where they are made.
func (opt Options) withDefaults(log *slog.Logger) Options {
	if opt.Nexar.Logger == nil {
		opt.Nexar.Logger = log
	}
	opt.Nexar.Timeout = cmp.Or(opt.Nexar.Timeout, opt.Timeout)
	s := &opt.Shm
	s.Timeout = cmp.Or(s.Timeout, opt.Nexar.Timeout)
	s.FailureTimeout = cmp.Or(s.FailureTimeout, opt.FailureTimeout)
	s.ConnectTimeout = cmp.Or(s.ConnectTimeout, opt.ConnectTimeout)
	if s.Logger == nil {
		s.Logger = log
	}
	if opt.NCCL.Logger == nil {
		opt.NCCL.Logger = log
	}
	if opt.Hierarchy.Logger == nil {
		opt.Hierarchy.Logger = log
	}
	opt.Nexar.FlightRecorder = cmp.Or(opt.Nexar.FlightRecorder, opt.FlightRecorder)
	s.FlightRecorder = cmp.Or(s.FlightRecorder, opt.FlightRecorder)
	opt.Hierarchy.FlightRecorder = cmp.Or(opt.Hierarchy.FlightRecorder, opt.FlightRecorder)
	opt.NCCL.FlightRecorder = cmp.Or(opt.NCCL.FlightRecorder, opt.FlightRecorder)
	return opt
}

// netConfig is c, the network transport's config, with the timeouts the
// Options give it: what nexar.Config.Timeouts reports of it, and so the
// Plan (Plan.Timeouts.Network).
func (opt Options) netConfig(c nexar.NetConfig) nexar.NetConfig {
	c.FailureTimeout, c.ConnectTimeout = opt.FailureTimeout, opt.ConnectTimeout
	return c
}

// ncclConfig is the config of an NCCL communicator on dev: opt.NCCL with
// the device, and name where the user gave none ("": nccl's default).
func (opt Options) ncclConfig(dev *nccl.Device, name string) nccl.Config {
	c := opt.NCCL
	c.Device = dev
	c.Name = cmp.Or(c.Name, name)
	return c
}
