// Package nexar is hiercomm's inter-node runtime: a world of ranks joined by
// a Transport (by default QUIC with a TLS-over-TCP lane for large frames,
// QUIC alone, TCP for trusted fabrics, in-memory for tests and simulation),
// and every collective as a schedule executed over it. On
// its own, a nexar Comm is the flat comm.Communicator.
//
// Algorithms never touch sockets: a schedule knows its rank, its size and its
// neighbours, and moves byte frames through the Transport interface, which
// knows nothing of collectives. Frames carry the communicator id, the
// collective's sequence number, the step within it and the call's Signature,
// so concurrent collectives and sub-communicators never cross-talk and a
// mismatched call is detected on arrival.
//
// A world made by Connect from a static Config grows with Comm.Grow on its
// members and Join on the newcomers (grow.go): a world of its own over new
// connections, which the members agree to over the old one.
//
// nexar imports comm and comm/schedule (its schedules and cost model) and
// internal/hoptrace; never another tier (internal/rules/imports_test.go
// holds it to that). Its multi-process tests start their worlds with
// internal/nexarjob.
package nexar
