// Package tier is the implementer's toolkit of hiercomm: what a
// communicator is built from, and what a training program never needs.
// Package comm is the user's contract (the Communicator interface, buffers,
// element types, reduction operators, the errors a program matches); tier
// holds what every tier (nexar, shm, nccl), the hierarchy and the root
// package share to implement it:
//
//   - the executor behind a communicator's Start (Exec, Task, Blocking for
//     the blocking methods, Runner);
//   - the failure state machine every tier feeds (Failure, Notice, Effects,
//     FailCode, the way a failure travels between ranks), and the markers
//     a composed communicator gives its parts' Abort (FromOutside, Inside);
//   - the census of a composed communicator (Watch, Judge, Stragglers, the
//     wire form of a comm.Progress);
//   - the flight recorder of the last collectives (FlightRecorder, DumpLive);
//   - the one vocabulary of timeouts every tier takes (Timeouts: an
//     operation's Timeout, a silent peer's FailureTimeout, a world's
//     ConnectTimeout), with their defaults per Medium (DefaultTimeouts);
//   - how a tier built standalone grows (Growth: the steps every tier's
//     Grow and Join take), and the agreement of every rank on its outcome
//     and a configuration (Agree, Field, FieldsDifferError);
//   - the checks of a call's arguments (Validate, ValidateHost, RequireHost;
//     CheckCache, which skips them for a call found good before) and what
//     a tier reads of a call (Uses, ResultAt, Offsets,
//     WithoutBuffers), Split's grouping (SplitMembers, SplitGroups);
//   - what a composed communicator passes down, in the context, with each
//     call it makes of its parts (Phase: the user's call as comm.Outer,
//     and its refusal), and the signature a part compares (SignatureOf);
//   - the CPU reduction kernels every transport that reduces on the host
//     calls (ReduceFunc, Kernel, FinishAvg, FillIdentity).
//
// tier imports comm, which cannot import it; every transport (nexar, shm,
// nccl), the hierarchical communicator and the root package import it.
package tier
