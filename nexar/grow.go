package nexar

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/nexar/transport/netmesh"
)

// Grow takes newcomers into a running world that was built standalone
// (Connect with a static Config): every member of c calls it with cfg,
// the grown world's Config for this rank, and each newcomer calls Join
// with the grown world's Config for its rank; every one of them gets a
// communicator of the grown world. cfg.Net.Addrs lists every rank of the
// grown world: first c's ranks (their new listening addresses, in c's
// rank order: the members keep their ranks), then the newcomers, who
// take the ranks after them. cfg.Net.Rank is c.Rank(). Every member and
// every newcomer passes the same Net.Addrs, Net.JobID, Net.JobKey,
// Network, Net.FailureTimeout, Net.ConnectTimeout, Net.ConnsPerPeer and
// Options (but Logger and Spin). A member's new address must not be one
// its running transport still listens on (a QUIC world listens on its
// own until it closes): give each member a fresh port, or an
// already-bound Net.Listener and Net.PacketConn, which Grow takes over
// as Connect does (and closes, when it fails before connecting).
//
// The members first agree over c (tier.Agree) that each can grow, and
// on the grown configuration: a member's bad Config (fewer ranks than c
// has, a Net.Rank that is not its rank, an address that is not
// host:port, ...) gives every member an error naming that member and
// what was wrong, and configurations that differ give every member an
// error naming the fields that differ (the indices of Net.Addrs that
// differ). They then connect the grown world (Connect: within
// Net.ConnectTimeout), and run a first collective on it that the
// newcomers run in Join too: the same agreement on the configuration,
// over the grown world, so a newcomer whose Config differs fails every
// one's Grow. Last, the members agree over c on the outcome, and rank 0
// tells the newcomers on the grown world.
//
// On success Grow closes c (a world Comm's Close closes its transport
// once the communicators Shrink made of it are closed too) and returns
// the grown world Comm, which owns its own transport. A failure — a bad
// or different Config, a newcomer that never comes or dies, the grown
// world's connect timeout — returns an error on every member within
// Net.ConnectTimeout of the grown configuration (and the agreements'
// collectives over c, bounded by ctx and c's Options.Timeout), and
// leaves c as it was: usable, unless one of c's own members failed (c
// is then aborted as after any collective, and Shrink applies). A rank
// that dies in the last step, rank 0's word to the newcomers, may leave
// the grown communicators aborted when Grow returns them: their next
// call fails naming it, as after any failure.
//
// With as many ranks in cfg as c has (no newcomers), every member gets
// c itself back at once, after the first agreement (cfg's sockets, if
// any, are closed).
//
// Grow is a collective on c: call it on every member, when no other
// call of c is in flight. Split children of c are not carried over:
// Split the grown world again.
func (c *Comm) Grow(ctx context.Context, cfg Config) (*Comm, error) {
	size := len(cfg.Net.Addrs)
	fail := func(err error) (*Comm, error) {
		return nil, fmt.Errorf("nexar: rank %d of %s: Grow from %d to %d ranks: %w", c.rank, c.name, c.Size(), size, err)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		closeSockets(cfg.Net)
		return fail(comm.ErrClosed)
	}
	fields, err := grownFields(cfg)
	if err == nil {
		switch {
		case cfg.Net.Rank != c.rank:
			err = fmt.Errorf("Net.Rank is %d, not this member's rank %d (the members keep their ranks: pass Net.Rank = Rank())", cfg.Net.Rank, c.rank)
		case size < c.Size():
			err = fmt.Errorf("Net.Addrs lists %d ranks, fewer than the %d of the communicator to grow (Grow does not shrink: use Shrink)", size, c.Size())
		}
	}
	if err := agreeGrown(ctx, c, err, fields, cfg.Net.Addrs); err != nil {
		closeSockets(cfg.Net)
		return fail(err)
	}
	if size == c.Size() {
		closeSockets(cfg.Net)
		return c, nil
	}

	g, err := growth(cfg, fields, c.opt).Member(ctx, c)
	if err != nil {
		return fail(err)
	}
	return g.(*Comm), nil
}

// Join makes this process a newcomer of a world that grows (Comm.Grow):
// every member calls Grow, and each newcomer Join, with the grown world's
// Config for its rank (cfg.Net.Rank: its rank, after the members'). It
// returns the grown world Comm once every member and newcomer has
// connected, agreed on the configuration and heard the members' word
// that they keep it; or an error within Net.ConnectTimeout, when a
// process of the grown world did not come, a Config differs (the error
// names the fields), or the members gave the Grow up (their Grow then
// failed too). Join is Connect for a newcomer: a Connect alone would
// wait for no agreement and leave the newcomer a world its members may
// give up.
func Join(ctx context.Context, cfg Config) (*Comm, error) {
	fail := func(err error) (*Comm, error) {
		return nil, fmt.Errorf("nexar: rank %d: Join a world growing to %d ranks: %w", cfg.Net.Rank, len(cfg.Net.Addrs), err)
	}
	fields, err := grownFields(cfg)
	if err != nil {
		closeSockets(cfg.Net)
		return fail(err)
	}
	opt, _ := cfg.Options.withDefaults() // grownFields checked it
	g, err := growth(cfg, fields, opt).Newcomer(ctx)
	if err != nil {
		return fail(err)
	}
	return g.(*Comm), nil
}

// growth is how a process of the grown world of cfg meets the others
// (tier.Growth): Connect, and the agreement on fields.
func growth(cfg Config, fields []tier.Field, opt Options) tier.Growth {
	return tier.Growth{
		Fields:  fields,
		Connect: func(ctx context.Context) (comm.Communicator, error) { return Connect(ctx, cfg) },
		Bound:   cfg.Timeouts().ConnectTimeout,
		Warn: func(err error) {
			opt.Logger.Warn("nexar: Grow", "rank", cfg.Net.Rank, "err", err)
		},
	}
}

// agreeGrown is the members' first agreement over c: on each one's
// outcome (err) and on fields. When the grown world's addresses differ
// it agrees once more, on each address, to name those that differ.
func agreeGrown(ctx context.Context, c *Comm, err error, fields []tier.Field, addrs []string) error {
	err = tier.Agree(ctx, c, err, fields...)
	var differ *tier.FieldsDifferError
	if !errors.As(err, &differ) || !slices.Contains(differ.Fields, "Net.Addrs") || slices.Contains(differ.Fields, "len(Net.Addrs)") {
		return err
	}
	each := make([]tier.Field, len(addrs))
	for i, a := range addrs {
		each[i] = tier.Field{Name: fmt.Sprintf("Net.Addrs[%d]", i), Value: []byte(a)}
	}
	if err := tier.Agree(ctx, c, nil, each...); err != nil {
		return fmt.Errorf("the members' grown configurations differ: %w", err)
	}
	return err
}

// grownFields are the items of cfg that every process of the grown world
// must give alike, with their defaults filled in, and the error of a
// Config that Connect would refuse (the fields are there, as many, even
// then: every member's agreement reduces as many).
func grownFields(cfg Config) ([]tier.Field, error) {
	opt, err := cfg.Options.withDefaults()
	network := cmp.Or(cfg.Network, "quic")
	if _, nerr := netmesh.SocketNetwork(network); err == nil {
		err = nerr
	}
	nc := cfg.Net
	nc.PacketConn, nc.Listener = nil, nil // validate only reads them
	if full, verr := nc.WithDefaults(); verr != nil {
		err = cmp.Or(err, verr)
	} else {
		nc = full
	}
	field := func(name string, v any) tier.Field {
		return tier.Field{Name: name, Value: fmt.Appendf(nil, "%v", v)}
	}
	return []tier.Field{
		field("Network", network),
		field("Net.JobID", nc.JobID),
		{Name: "Net.JobKey", Value: nc.JobKey},
		field("len(Net.Addrs)", len(nc.Addrs)),
		field("Net.Addrs", nc.Addrs),
		field("Net.FailureTimeout", nc.FailureTimeout),
		field("Net.ConnectTimeout", nc.ConnectTimeout),
		field("Net.ConnsPerPeer", nc.ConnsPerPeer),
		field("Options.Timeout", opt.Timeout),
		field("Options.ProbeAfter", opt.ProbeAfter),
		field("Options.SegmentBytes", opt.SegmentBytes),
		field("Options.Cost", opt.Cost),
		field("Options.FlightRecorder", opt.FlightRecorder),
	}, err
}

// closeSockets closes the sockets a Config handed over, when what would
// have taken them over (Connect) does not run.
func closeSockets(n NetConfig) {
	if n.PacketConn != nil {
		n.PacketConn.Close()
	}
	if n.Listener != nil {
		n.Listener.Close()
	}
}
