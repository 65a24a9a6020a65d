package hiercomm

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/comm"
	"github.com/hiercomm/hiercomm/comm/schedule"
	"github.com/hiercomm/hiercomm/hierarchy"
	"github.com/hiercomm/hiercomm/nccl"
	"github.com/hiercomm/hiercomm/topology"
)

// chooseDevice decides whether this rank runs the GPU tier, and on which
// GPU: HIERCOMM_INTRA=nccl requires it (an error says why it cannot be
// used), shm and nexar refuse it, auto takes it when NCCL and the driver
// load and the process sees a GPU. The device is the launch's Device
// (HIERCOMM_DEVICE) if set, else the local rank (torchrun's LOCAL_RANK →
// cuda:LOCAL_RANK), counted among the GPUs CUDA_VISIBLE_DEVICES leaves
// visible. opt.GPU, when set, is the library to use (tests: the fake).
func chooseDevice(l launchenv.Launch, opt Options, log *slog.Logger) (*nccl.Device, error) {
	if l.Intra == "shm" || l.Intra == "nexar" {
		return nil, nil
	}
	lib := opt.GPU
	if lib == nil {
		var err error
		if lib, err = nccl.Shared(nccl.LoadOptions{NCCLPath: l.NCCLLibrary, CUDAPath: l.CUDALibrary}); err != nil {
			if l.Intra == "nccl" {
				return nil, fmt.Errorf("%s=nccl, but the GPU tier cannot be used here: %w", launchenv.EnvIntra, err)
			}
			log.Debug("hiercomm: no GPU tier; host memory only", "why", err)
			return nil, nil
		}
	}
	n, err := lib.DeviceCount()
	if err != nil || n == 0 {
		if l.Intra == "nccl" {
			return nil, fmt.Errorf("%s=nccl, but this process sees no GPU (%v; check CUDA_VISIBLE_DEVICES)", launchenv.EnvIntra, err)
		}
		return nil, nil
	}
	ordinal, why := l.Device, launchenv.EnvDevice
	if ordinal < 0 {
		ordinal, why = l.LocalRank, "the local rank"
	}
	if ordinal >= n {
		return nil, fmt.Errorf("GPU %d (%s) does not exist: this process sees %d GPU(s); set %s or CUDA_VISIBLE_DEVICES so that each rank of a node has its own",
			ordinal, why, n, launchenv.EnvDevice)
	}
	return lib.Device(ordinal)
}

// connectGPU builds the communicator of a GPU world over its flat host
// world (nexar between the nodes, or a world of one): NCCL among the
// ranks of each node (over shared memory as its control), and device data
// across nodes through page-locked host memory on the world and its rails.
// The result accepts device buffers of dev only.
func connectGPU(ctx context.Context, world comm.Communicator, l launchenv.Launch, topo *topology.Topology, rank int, dev *nccl.Device, opt Options) (comm.Communicator, string, error) {
	staged := nccl.NewStaged(world, dev)
	g, homogeneous := topo.RanksPerNode()
	if topo.NumNodes() > 1 && homogeneous && g == 1 {
		return staged, fmt.Sprintf("%s between single-GPU nodes, staged through host memory", l.Network), nil
	}
	control, err := connectIntraHost(ctx, l, topo, rank, opt)
	if err != nil {
		staged.Close()
		return nil, "", err
	}
	intra, err := nccl.New(ctx, control, opt.ncclConfig(dev, fmt.Sprintf("node %d nccl", topo.NodeOf(rank))))
	if err != nil {
		staged.Close()
		return nil, "", fmt.Errorf("hiercomm.Init: rank %d: NCCL among the ranks of node %d: %w", rank, topo.NodeOf(rank), err)
	}
	if topo.NumNodes() == 1 {
		staged.Close() // one node: NCCL carries everything
		return intra, "nccl", nil
	}
	// NCCL inside the node has no model of its own yet: the intra part
	// takes the defaults unless the user gave one.
	cfg := hierarchyConfig(opt, schedule.CostModel{}, l, topo, rank, false)
	if cfg.Stager == nil && cfg.NewStager == nil {
		cfg.NewStager = func() hierarchy.Stager { return nccl.NewStager(dev) }
	}
	if cfg.NewIntra == nil {
		cfg.NewIntra = shrunkNCCL(l, dev, opt) // shrink.go
	}
	h, err := hierarchy.Build(ctx, staged, topo, intra, cfg)
	if err != nil {
		intra.Close()
		staged.Close()
		return nil, "", fmt.Errorf("hiercomm.Init: %w", err)
	}
	return h, "hierarchy: nccl within nodes, " + l.Network + " between (staged through host memory)", nil
}
