package hierarchy

import (
	"context"
	"fmt"

	"github.com/hiercomm/hiercomm/comm"
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
	h.mu.Lock()
	closed := h.closed
	h.mu.Unlock()
	if closed {
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
	if t.NumNodes() == 1 && t.Size() > 1 && h.cfg.NewIntra != nil {
		intra, err := h.cfg.NewIntra(ctx, t, world.Rank(), generation(world, old))
		world.Close()
		if err != nil {
			return fail(fmt.Errorf("making the shrunk intra-node part: %w", err))
		}
		return intra, nil
	}
	if g, homogeneous := t.RanksPerNode(); t.NumNodes() == 1 || homogeneous && g == 1 {
		return world, nil
	}
	cfg := h.cfg
	cfg.Stager, cfg.NewStager = nil, stager
	cfg.Name = fmt.Sprintf("%s/shrink(%d of %d)", h.cfg.Name, t.Size(), h.size)
	var intra comm.Communicator
	if cfg.NewIntra != nil {
		intra, err = cfg.NewIntra(ctx, t, world.Rank(), generation(world, old))
		if err != nil {
			world.Close()
			return fail(fmt.Errorf("making the shrunk intra-node part: %w", err))
		}
	}
	nh, err := Build(ctx, world, t, intra, cfg)
	if err != nil {
		if intra != nil {
			intra.Close()
		}
		world.Close()
		return fail(err)
	}
	return nh, nil
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
