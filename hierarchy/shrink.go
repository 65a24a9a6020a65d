package hierarchy

import (
	"context"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/topology"
)

// Shrink implements comm.Communicator. The world part shrinks — every rank of
// the hierarchy is in it, so its agreement on the failed ranks is the
// hierarchy's — and the survivors' topology is computed again
// (topology.Survivors: ranks renumbered in order, local ranks within each
// node, a node left without ranks gone). On it the intra-node parts are
// made — Config.NewIntra's (shared memory again, under hiercomm.Init), or
// else splits of the shrunk world — and the rails split off the shrunk
// world, as Build does: the result is again a hierarchy. With one rank on
// each node left it is the shrunk world itself (as Split's children are);
// with one node left, its intra-node part where Config.NewIntra makes one
// (as Init makes a one-node world of shared memory alone), else the
// shrunk world.
//
// Call it when no collective of h is in flight (after a failure, every one
// has ended with it). h stays aborted; Close it after Shrink.
func (h *Comm) Shrink(ctx context.Context) (comm.Communicator, error) {
	fail := func(err error) (comm.Communicator, error) {
		return nil, h.opError(comm.KindShrink, 0, culpritOr(err, -1), err)
	}
	if h.isClosed() {
		return fail(comm.ErrClosed)
	}
	stager := h.childStager()
	if stager == nil {
		return fail(&comm.ArgError{Kind: comm.KindShrink, Arg: "Config.NewStager", Problem: fmt.Sprintf(
			"is nil, and the shrunk communicator cannot share this one's Stager (%T: it serves one executor); set Config.NewStager", h.cfg.Stager)})
	}
	h.mu.Lock()
	aborted := h.failure.AbortCause()
	h.mu.Unlock()
	if aborted != nil {
		// The world part learns of the failure from this abort, which
		// may still be on its way through the other parts: its
		// agreement then counts the rank the failure blames as failed
		// from the start, instead of waiting for its transport to see
		// the death. (First cause wins: this changes nothing if it
		// knows already.)
		h.world.Abort(aborted)
	}
	world, err := h.world.Shrink(ctx)
	if err != nil {
		return fail(fmt.Errorf("shrinking the world part: %w", err))
	}
	old, err := comm.Survivors(ctx, world, h.rank)
	if err != nil {
		world.Close()
		return fail(err)
	}
	t, err := h.topo.Survivors(old)
	if err != nil {
		world.Close()
		return fail(err)
	}
	cfg := h.cfg
	cfg.Stager, cfg.NewStager = nil, stager
	cfg.Name = fmt.Sprintf("%s/shrink(%d of %d)", h.cfg.Name, t.Size(), h.size)
	c, err := compose(ctx, world, t, cfg, generation(world, old))
	if err != nil {
		return fail(err)
	}
	return c, nil
}

// compose makes the communicator of topology t over world, this
// process's end of t's world part (with t's rank numbers), as Shrink
// and Grow do: a hierarchy (Build) with its intra-node parts made by
// cfg.NewIntra, with generation, where it is set, else split off world;
// with one rank on each node, world itself; with one node, its
// intra-node part where cfg.NewIntra makes one, else world. It owns
// world: it closes it on error, and when the result does without it.
func compose(ctx context.Context, world comm.Communicator, t *topology.Topology, cfg Config, generation string) (comm.Communicator, error) {
	if t.NumNodes() == 1 && t.Size() > 1 && cfg.NewIntra != nil {
		intra, err := cfg.NewIntra(ctx, t, world.Rank(), generation)
		world.Close()
		if err != nil {
			return nil, fmt.Errorf("making the intra-node part: %w", err)
		}
		return intra, nil
	}
	if g, homogeneous := t.RanksPerNode(); t.NumNodes() == 1 || homogeneous && g == 1 {
		return world, nil
	}
	var intra comm.Communicator
	if cfg.NewIntra != nil {
		var err error
		intra, err = cfg.NewIntra(ctx, t, world.Rank(), generation)
		if err != nil {
			world.Close()
			return nil, fmt.Errorf("making the intra-node part: %w", err)
		}
	}
	nh, err := Build(ctx, world, t, intra, cfg)
	if err != nil {
		if intra != nil {
			intra.Close()
		}
		world.Close()
		return nil, err
	}
	return nh, nil
}

// isClosed reports whether h was closed.
func (h *Comm) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// generation names a Shrink for Config.NewIntra: the shrunk world's name
// where it has one (a nexar communicator's names every Shrink apart:
// "world/shrink#2(3 of 4)"), and the survivors' former ranks.
func generation(world comm.Communicator, old []int) string {
	name := ""
	if n, ok := world.(interface{ Name() string }); ok {
		name = n.Name()
	}
	return fmt.Sprintf("%s %v", name, old)
}
