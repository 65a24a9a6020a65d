package hiercomm

import (
	"fmt"
	"log/slog"

	"github.com/hiercomm/hiercomm/cluster/launchenv"
	"github.com/hiercomm/hiercomm/nccl"
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
