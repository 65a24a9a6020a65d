package hiercomm

import (
	"context"
	"fmt"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/topology"
)

// Shrink implements comm.Communicator: the World's communicator shrinks
// to the survivors of a failure (every communicator Init makes can), and
// the result is a *World of them, with their topology (topology.Survivors)
// and this process's new rank. Every survivor must call it.
//
// The new World takes over the job's membership: Close this World after
// Shrink (it then closes only its communicator, not the membership), and
// the new one when done. The membership's failure detector still reaches
// the new communicator: it shares this one's transport, and news of a
// death aborts every communicator over it. Re-create what was Split from
// this World on the new one.
func (w *World) Shrink(ctx context.Context) (comm.Communicator, error) {
	s, err := w.Communicator.Shrink(ctx)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (comm.Communicator, error) {
		s.Close()
		return nil, fmt.Errorf("hiercomm: rank %d: after Shrink: %w", w.rank, err)
	}
	old, err := comm.Survivors(ctx, s, w.rank)
	if err != nil {
		return fail(err)
	}
	topo, err := w.topo.Survivors(old)
	if err != nil {
		return fail(err)
	}
	nw := &World{Communicator: s, topo: topo, rank: s.Rank(), cluster: w.cluster, device: w.device, launch: w.launch, log: w.log, plan: w.plan,
		opt: w.opt, gen: w.gen, failures: w.failures, launched: make([]int, len(old)), tracing: w.tracing}
	for i, r := range old {
		nw.launched[i] = w.launchedRank(r)
	}
	w.cluster = nil
	w.reportShrink(nw)
	if nw.rank == 0 {
		w.log.Info("hiercomm: world shrunk", "size", topo.Size(), "of", len(w.topo.Members()), "nodes", topo.NumNodes(), "via", fmt.Sprintf("%T", s))
	}
	return nw, nil
}

// shrunkIntra is hierarchy.Config.NewIntra under Init: a node's survivors
// join shared memory again, in segments of their own (the generation
// joins the job id in shmNamespace's hash).
func shrunkIntra(l launchenv.Launch, opt Options) func(context.Context, *topology.Topology, int, string) (comm.Communicator, error) {
	return func(ctx context.Context, t *topology.Topology, rank int, generation string) (comm.Communicator, error) {
		l.JobID += " " + generation
		return connectIntraHost(ctx, l, t, rank, opt)
	}
}

// shrunkNCCL is hierarchy.Config.NewIntra for a hierarchy of GPU nodes
// under Init: NCCL among a node's survivors, over shared memory again as
// its control (as Init's build makes it).
func shrunkNCCL(l launchenv.Launch, dev *nccl.Device, opt Options) func(context.Context, *topology.Topology, int, string) (comm.Communicator, error) {
	control := shrunkIntra(l, opt)
	return func(ctx context.Context, t *topology.Topology, rank int, generation string) (comm.Communicator, error) {
		c, err := control(ctx, t, rank, generation)
		if err != nil {
			return nil, err
		}
		return nccl.New(ctx, c, opt.ncclConfig(dev, fmt.Sprintf("node %d nccl", t.NodeOf(rank))))
	}
}
