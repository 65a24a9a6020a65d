package shm

import (
	"context"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
)

// Grow takes newcomers of this host into a running communicator that was
// built standalone (New): every member of c calls it with cfg, the grown
// communicator's Config for this rank, and each newcomer calls Join with
// the grown communicator's Config for its rank; every one of them gets
// the grown communicator. cfg.Size is the grown size; cfg.Rank is
// c.Rank() (the members keep their ranks, the newcomers take the ranks
// after them). cfg.Namespace must be a fresh one, not c's: the grown
// communicator's segments are named apart from the live ones (add a
// generation to the job's namespace: "job-7-g1", "job-7-g2", ...). Every
// member and every newcomer passes the same Namespace, Size, Name,
// Ranks, SlotBytes, StepBytes, EagerBytes, Cost, SmallReduceBytes,
// Timeout, FailureTimeout and ConnectTimeout.
//
// The steps and what a failure leaves are nexar's Comm.Grow's
// (tier.Growth): the members agree over c that each can grow and on the
// configuration (a member's bad Config — a smaller Size, a Rank that is
// not its rank, c's own Namespace — gives every member an error naming
// that member and what was wrong; configurations that differ give every
// member an error naming the fields), then every process attaches to the
// grown communicator's segment (New, within ConnectTimeout) and agrees
// on the configuration over it, the members agree over c on the outcome,
// and rank 0 tells the newcomers. On success Grow closes c and returns
// the grown communicator; on failure every member gets an error within
// the grown configuration's ConnectTimeout (and the agreements over c,
// bounded by ctx and c's Timeout) and c is as it was: usable, unless one
// of its own ranks failed.
//
// With cfg.Size equal to c's size (no newcomers), every member gets c
// itself back at once, after the first agreement.
//
// Grow is a collective on c: call it on every member, when no other call
// of c is in flight. Split children of c are not carried over.
func (c *Comm) Grow(ctx context.Context, cfg Config) (*Comm, error) {
	fail := func(err error) (*Comm, error) {
		return nil, fmt.Errorf("shm: rank %d of %s: Grow from %d to %d ranks: %w", c.rank, c.name, c.size, cfg.Size, err)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed || c.closing.Load() {
		return fail(comm.ErrClosed)
	}
	full, fields, err := grownFields(cfg)
	if err == nil {
		switch {
		case full.Rank != c.rank:
			err = fmt.Errorf("Rank is %d, not this member's rank %d (the members keep their ranks: pass Rank = Rank())", full.Rank, c.rank)
		case full.Size < c.size:
			err = fmt.Errorf("Size is %d, smaller than the %d of the communicator to grow (Grow does not shrink: use Shrink)", full.Size, c.size)
		case full.Namespace == c.cfg.Namespace:
			err = fmt.Errorf("the namespace %q is the communicator's to grow: give the grown one a fresh namespace (e.g. with a generation: %q)", full.Namespace, full.Namespace[:min(len(full.Namespace), 97)]+"-g1")
		}
	}
	if err := tier.Agree(ctx, c, err, fields...); err != nil {
		return fail(err)
	}
	if full.Size == c.size {
		return c, nil
	}
	g, err := growth(full, fields).Member(ctx, c)
	if err != nil {
		return fail(err)
	}
	return g.(*Comm), nil
}

// Join makes this process a newcomer of a shared-memory communicator that
// grows (Comm.Grow): every member calls Grow, and each newcomer Join,
// with the grown communicator's Config for its rank (cfg.Rank: its rank,
// after the members'). It returns the grown communicator once every
// member and newcomer has attached, agreed on the configuration and
// heard the members' word that they keep it; or an error within
// cfg.ConnectTimeout, when a rank did not come, a Config differs (the
// error names the fields), or the members gave the Grow up. Join is New
// for a newcomer: New alone would wait for no agreement.
func Join(ctx context.Context, cfg Config) (*Comm, error) {
	full, fields, err := grownFields(cfg)
	if err == nil {
		var g comm.Communicator
		if g, err = growth(full, fields).Newcomer(ctx); err == nil {
			return g.(*Comm), nil
		}
	}
	return nil, fmt.Errorf("shm: rank %d: Join a communicator growing to %d ranks: %w", cfg.Rank, cfg.Size, err)
}

// growth is how a rank of the grown communicator of cfg (its defaults
// filled in) meets the others (tier.Growth): New, and the agreement on
// fields.
func growth(cfg Config, fields []tier.Field) tier.Growth {
	return tier.Growth{
		Fields:  fields,
		Connect: func(ctx context.Context) (comm.Communicator, error) { return New(ctx, cfg) },
		Bound:   cfg.ConnectTimeout,
		Warn: func(err error) {
			cfg.Logger.Warn("shm: Grow", "rank", cfg.Rank, "err", err)
		},
	}
}

// grownFields are cfg with its defaults filled in, the items of it that
// every rank of the grown communicator must give alike, and the error of
// a Config that New would refuse (the fields are there, as many, even
// then: every member's agreement reduces as many).
func grownFields(cfg Config) (Config, []tier.Field, error) {
	full, err := cfg.withDefaults()
	field := func(name string, v any) tier.Field {
		return tier.Field{Name: name, Value: fmt.Appendf(nil, "%v", v)}
	}
	return full, []tier.Field{
		field("Namespace", full.Namespace),
		field("Size", full.Size),
		field("Name", full.Name),
		field("Ranks", full.Ranks),
		field("SlotBytes", full.SlotBytes),
		field("StepBytes", full.StepBytes),
		field("EagerBytes", full.EagerBytes),
		field("Cost", full.Cost),
		field("SmallReduceBytes", full.SmallReduceBytes),
		field("Timeout", full.Timeout),
		field("FailureTimeout", full.FailureTimeout),
		field("ConnectTimeout", full.ConnectTimeout),
	}, err
}
