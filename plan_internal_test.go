package hiercomm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/nexar"
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

// twoByTwo is a topology of 2 nodes of 2 ranks, on hosts prefix0 and
// prefix1.
func twoByTwo(t *testing.T, prefix string) *topology.Topology {
	t.Helper()
	var members []topology.Member
	for r := range 4 {
		members = append(members, topology.Member{Rank: r, Host: fmt.Sprintf("%s%d", prefix, r/2), Local: r % 2, Device: -1})
	}
	topo, err := topology.New(members)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// composeAll builds, in this process, what Init builds on every rank of
// topo from their Plans (composeOver), over a world in memory made with
// opt.Nexar; the communicators are closed when the test ends.
func composeAll(t *testing.T, l launchenv.Launch, topo *topology.Topology, opt Options) []comm.Communicator {
	t.Helper()
	world, err := nexar.NewMemoryWorld(topo.Size(), opt.Nexar)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := make([]comm.Communicator, topo.Size())
	errs := make([]error, topo.Size())
	var wg sync.WaitGroup
	for r := range cs {
		wg.Go(func() { cs[r], errs[r] = composeOver(ctx, l, topo, r, nil, opt, world[r]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		nexar.CloseAll(world)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}
