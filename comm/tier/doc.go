// Package tier is the implementer's toolkit of hiercomm: what a
// communicator is built from, and what a training program never needs.
// Package comm is the user's contract (the Communicator interface, buffers,
// element types, reduction operators, the errors a program matches); tier
// holds the CPU reduction kernels every transport that reduces on the host
// calls (ReduceFunc, Kernel, FinishAvg, FillIdentity).
//
// tier imports comm, which cannot import it; every transport (nexar, shm,
// nccl), the hierarchical communicator and the root package import it.
package tier
