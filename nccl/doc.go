// Package nccl is the GPU tier: NCCL between the GPUs of a node, and the
// CUDA driver calls around it, loaded at run time with purego so that the
// project builds with CGO_ENABLED=0 and runs on machines without CUDA.
//
// What lives here:
//   - Library (load.go, real.go): libcuda.so.1 and libnccl.so.2 found and
//     bound at run time (Load, Default, Available). The function table a
//     Library calls is the seam nccl/internal/cuapi, which tests on
//     machines without a GPU fill with an in-process double of both, host
//     memory as device memory (docs/gpu.md, "Testing without a GPU").
//   - Device (device.go): one GPU, its primary context current on an OS
//     thread of its own, on which every CUDA and NCCL call runs; Alloc,
//     Free, Write and Read for trainers (and the conformance suite).
//   - Comm (comm.go, exec.go, launch.go, split.go, p2p.go): a
//     comm.Communicator on device buffers over NCCL, made over a host
//     communicator of the same ranks (its control) that carries the unique
//     id, compares every call's arguments before NCCL sees it, carries
//     Send/Recv, and turns a peer's failure into an abort of NCCL. Shrink
//     (shrink.go) and Grow, with Join on the newcomers (grow.go), make a
//     new one as New does, over the shrunk or the grown control.
//   - Staged (staged.go): a host communicator (nexar between nodes) that
//     moves device buffers through page-locked host memory, pipelined
//     across calls; Stager (stager.go): the hierarchy's scratch memory and
//     local steps on a GPU.
//
// The package imports comm and nccl/internal/cuapi only (and purego); the
// hierarchy takes its Comm, Staged and Stager as values, and the root
// package wires them.
// docs/gpu.md tells how libraries are found, how devices are chosen, and
// what each error means.
package nccl
