package hiercomm

import (
	"cmp"
	"log/slog"
)

// withDefaults returns a copy of opt in which each tier's config is filled
// where the user left it zero (see Options): the logger and the timeouts
// the tiers share. The parts Init wires are set where they are made.
func (opt Options) withDefaults(log *slog.Logger) Options {
	if opt.Nexar.Logger == nil {
		opt.Nexar.Logger = log
	}
	s := &opt.Shm
	s.Timeout = cmp.Or(s.Timeout, opt.Nexar.Timeout)
	s.FailureTimeout = cmp.Or(s.FailureTimeout, opt.FailureTimeout)
	s.ConnectTimeout = cmp.Or(s.ConnectTimeout, opt.ConnectTimeout)
	if s.Logger == nil {
		s.Logger = log
	}
	if opt.Hierarchy.Logger == nil {
		opt.Hierarchy.Logger = log
	}
	return opt
}
