// Package comm is the contract every hiercomm communicator implements and
// every training program uses: the Communicator interface, typed host and
// device buffers, element types and reduction operators, and the typed
// errors that name the rank, the peer, the collective and its sequence
// number.
//
// What only implementations use (the executor, the failure machine and
// the census, the flight recorder, argument checks, the CPU reduction
// kernels) is in comm/tier. The conformance suite that every implementation must pass
// lives in comm/commtest.
//
// comm imports nothing else of hiercomm; every transport (nexar, shm, nccl)
// and the hierarchical communicator import it.
package comm
