// Package comm is the contract every hiercomm communicator implements: the
// Communicator interface, typed host and device buffers, element types and
// reduction operators, the CPU reduction kernels, and the typed errors that
// name the rank, the peer, the collective and its sequence number.
//
// The conformance suite that every implementation must pass lives in
// comm/commtest.
//
// comm imports nothing else of hiercomm; every transport (nexar, shm, nccl)
// and the hierarchical communicator import it.
package comm
