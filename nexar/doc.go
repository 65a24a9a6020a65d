// Package nexar is hiercomm's inter-node runtime: a world of ranks joined by
// a Transport (by default QUIC with a TLS-over-TCP lane for large frames,
// QUIC alone, TCP for trusted fabrics, in-memory for tests and simulation),
// and every collective as a schedule executed over it. On
// its own, a nexar Comm is the flat comm.Communicator.
//
// Algorithms never touch sockets: a schedule knows its rank, its size and its
// neighbours, and moves byte frames through a transport.Transport
// (nexar/transport), which knows nothing of collectives. Frames carry the
// communicator id, the collective's sequence number, the step within it and
// the call's Signature, so concurrent collectives and sub-communicators
// never cross-talk and a mismatched call is detected on arrival.
//
// A world made by Connect from a static Config grows with Comm.Grow on its
// members and Join on the newcomers (grow.go): a world of its own over new
// connections, which the members agree to over the old one.
//
// The transports live in packages of their own: nexar/transport/netmesh
// (QUIC, TCP, the TLS lane, the default two lanes) and
// nexar/transport/mem (in process). Connect joins a world over the
// network ones, NewMemoryWorld over the in-memory one, and NewWorld over
// any transport, an outside one included; the runtime uses what a
// transport offers beyond the interface only through package transport's
// optional interfaces, never its concrete types.
//
// nexar imports comm, comm/tier and comm/schedule (its schedules and cost
// model), internal/hoptrace, its transports and nexar/internal/timerpool;
// never another tier (internal/rules/imports_test.go holds it to that). Its
// multi-process tests start their worlds with internal/nexarjob.
package nexar
