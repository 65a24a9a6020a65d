package hierarchy

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/tier"
	"github.com/hiercomm/hiercomm/topology"
)

// Grown is what a hierarchy grows to (Comm.Grow, and a newcomer's Join).
// Every process of the grown hierarchy passes an equal Topology.
type Grown struct {
	// Topology is the grown job's shape: the members at their ranks
	// (0..P-1, each on the host it is on), then the newcomers
	// (topology.Topology.Grown makes it from the newcomers' Members: a
	// newcomer on a node of the job joins that node's intra-node part, one
	// on a new node adds a node to every rail). Required.
	Topology *topology.Topology
	// World makes this process's end of the grown world part: a
	// communicator of every rank of Topology, with its rank numbers — the
	// world tier's constructor with the grown configuration, such as
	// func(ctx context.Context) (comm.Communicator, error) { return
	// nexar.Connect(ctx, grownConfig) } (not nexar's Comm.Grow or Join:
	// the hierarchy's Grow makes the agreements, over all of its parts).
	// It must return within its connect timeout. Required.
	World func(ctx context.Context) (comm.Communicator, error)
	// ConnectTimeout bounds the grown communicator's first collective and
	// a newcomer's wait for the members' word (tier.Growth). If zero,
	// tier.DefaultConnectTimeout (60s).
	ConnectTimeout time.Duration
}

// Grow takes newcomers into a hierarchy built standalone (Build or New,
// from parts the caller made): every member of h calls it with grown,
// and each newcomer calls Join with an equal grown. The grown
// communicator is made as Shrink makes the shrunk one (compose): the
// grown world part (Grown.World), then the intra-node parts —
// Config.NewIntra's, with a generation that names this Grow, or else
// splits of the grown world — and the rails split off it (Build): a
// hierarchy again, or with one rank on each node the grown world part
// itself, with one node its intra-node part where Config.NewIntra makes
// one.
//
// The steps are tier.Growth's, over h: the members agree over h that
// each can grow and on the grown Topology (a member's Topology that has
// fewer ranks than h, or that moved a member to another host, gives
// every member an error naming it; topologies that differ give every
// member an error saying so), every process makes its end of the grown
// communicator and agrees on the Topology over it, the members agree
// over h on the outcome, and rank 0 tells the newcomers. On success
// Grow closes h (and its parts) and returns the grown communicator; on
// failure — a newcomer that never comes or dies, a part that could not
// be made — every member gets an error, and h is as it was: usable,
// unless one of its own ranks failed. With as many ranks in
// grown.Topology as h has, every member gets h itself back at once.
//
// Call it when no collective of h is in flight. A hierarchy whose
// Config.Stager serves only it needs Config.NewStager, as Split and
// Shrink do.
func (h *Comm) Grow(ctx context.Context, grown Grown) (comm.Communicator, error) {
	size := 0
	if grown.Topology != nil {
		size = grown.Topology.Size()
	}
	fail := func(err error) (comm.Communicator, error) {
		return nil, fmt.Errorf("hierarchy: rank %d of %s: Grow from %d to %d ranks: %w", h.rank, h.cfg.Name, h.size, size, err)
	}
	if h.isClosed() {
		return fail(comm.ErrClosed)
	}
	stager := h.childStager()
	err := grown.check()
	switch {
	case err != nil:
	case stager == nil:
		err = &comm.ArgError{Arg: "Config.NewStager", Problem: fmt.Sprintf(
			"is nil, and the grown communicator cannot share this one's Stager (%T: it serves one executor); set Config.NewStager", h.cfg.Stager)}
	case size < h.size:
		err = fmt.Errorf("the grown Topology has %d ranks, fewer than the %d of the hierarchy to grow (Grow does not shrink: use Shrink)", size, h.size)
	default:
		for r := range h.size {
			if was, is := h.topo.Member(r).Host, grown.Topology.Member(r).Host; was != is {
				err = fmt.Errorf("the grown Topology puts rank %d on host %q, but it is on %q (the members keep their ranks and hosts)", r, is, was)
				break
			}
		}
	}
	fields := grown.fields()
	if err := tier.Agree(ctx, h, err, fields...); err != nil {
		return fail(err)
	}
	if size == h.size {
		return h, nil
	}
	cfg := h.given
	cfg.Stager, cfg.NewStager = nil, stager
	g, err := grown.growth(cfg, fields).Member(ctx, h)
	if err != nil {
		return fail(err)
	}
	return g, nil
}

// Join makes this process a newcomer of a hierarchy that grows
// (Comm.Grow): every member calls Grow, and each newcomer Join, with an
// equal grown; cfg is the grown hierarchy's Config for this process (as
// Build takes it: its NewIntra and NewStager as the members' own, the
// same Cost, SmallBytes, ChunkBytes and NodeP2PViaWorld settings). It
// returns the grown communicator once every process has made it, agreed
// on the Topology and heard the members' word that they keep it; or an
// error, when a process did not come (within the grown world part's
// connect timeout), a Topology differs, or the members gave the Grow up.
func Join(ctx context.Context, grown Grown, cfg Config) (comm.Communicator, error) {
	err := grown.check()
	var c comm.Communicator
	if err == nil {
		if c, err = grown.growth(cfg, grown.fields()).Newcomer(ctx); err == nil {
			return c, nil
		}
	}
	return nil, fmt.Errorf("hierarchy: Join a hierarchy growing to %d ranks: %w", grown.size(), err)
}

// check names what is missing of g.
func (g Grown) check() error {
	switch {
	case g.Topology == nil:
		return &comm.ArgError{Arg: "Grown.Topology", Problem: "is nil: give the grown job's topology"}
	case g.World == nil:
		return &comm.ArgError{Arg: "Grown.World", Problem: "is nil: give the constructor of this process's end of the grown world part"}
	case g.ConnectTimeout < 0:
		return &comm.ArgError{Arg: "Grown.ConnectTimeout", Problem: fmt.Sprintf("%v is negative", g.ConnectTimeout)}
	}
	return nil
}

func (g Grown) size() int {
	if g.Topology == nil {
		return 0
	}
	return g.Topology.Size()
}

// fields are what every process of the grown hierarchy gives alike: its
// Topology (every member's host, local rank, device, name and address).
func (g Grown) fields() []tier.Field {
	var members []topology.Member
	if g.Topology != nil {
		members = g.Topology.Members()
	}
	return []tier.Field{{Name: "Grown.Topology", Value: fmt.Appendf(nil, "%+v", members)}}
}

// growth is how a process of the grown hierarchy meets the others
// (tier.Growth): its end of the grown world part, the communicator
// composed over it, and the agreement on fields.
func (g Grown) growth(cfg Config, fields []tier.Field) tier.Growth {
	t := g.Topology
	h := fnv.New64a()
	h.Write(fields[0].Value)
	generation := fmt.Sprintf("grown to %d %016x", t.Size(), h.Sum64())
	return tier.Growth{
		Fields: fields,
		Connect: func(ctx context.Context) (comm.Communicator, error) {
			world, err := g.World(ctx)
			if err != nil {
				return nil, fmt.Errorf("making the grown world part: %w", err)
			}
			if world.Size() != t.Size() {
				world.Close()
				return nil, fmt.Errorf("the grown world part has %d ranks, the grown Topology %d", world.Size(), t.Size())
			}
			return compose(ctx, world, t, cfg, generation)
		},
		Bound: cmp.Or(g.ConnectTimeout, tier.DefaultConnectTimeout),
		Warn: func(err error) {
			cmp.Or(cfg.Logger, slog.Default()).Warn("hierarchy: Grow", "err", err)
		},
	}
}
