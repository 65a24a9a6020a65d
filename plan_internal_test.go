package hiercomm

import (
	"context"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/topology"
)

// composeOver builds, on rank r of topo, what Init builds from its Plan,
// over world, a data plane the test made (nexar.NewMemoryWorld): the
// node tier and the composition, as build does after connecting. dev is
// the rank's GPU, or nil.
func composeOver(ctx context.Context, l launchenv.Launch, topo *topology.Topology, r int, dev *nccl.Device, opt Options, world comm.Communicator) (comm.Communicator, error) {
	gpu := -1
	if dev != nil {
		gpu = dev.Ordinal()
	}
	p, err := NewPlan(l, topo, r, gpu, opt)
	if err != nil {
		world.Close()
		return nil, err
	}
	c, _, err := compose(ctx, p, setup{launch: l, topo: topo, rank: r, dev: dev, opt: opt.withDefaults(opt.Logger)}, world)
	return c, err
}
