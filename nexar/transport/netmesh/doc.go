// Package netmesh holds nexar's network transports, each a
// transport.Transport: QUIC (NewQUIC), plain TCP (NewTCP), and the
// default network's two lanes (NewLanes: QUIC for setup, control and small
// frames, TLS 1.3 over TCP for frames from BulkFrameMin); New picks one by
// its network's name, and Config says where the ranks are and how they
// authenticate (a job key, from which every rank derives the same job CA:
// jobca.go).
//
// They are one package because they are one mesh (mesh.go): the same
// links, frame format (wire.go), read loops, heartbeats, failure reports
// and close protocol, differing only in how a link is made and torn down;
// the two lanes mark a dropped peer on both meshes before they cut
// either. Split into a package per transport, all of that would have to be
// exported from a shared internal package for the sake of the split.
//
// Beyond Transport, the transports offer what package transport names as
// optional: NowSender, PeerDropper and Staller (all of them), Poller
// (plain TCP, whose pumps a waiting receive drives: pump.go), and they
// let a transport.Placer's receives take large frames straight into their
// memory (plain TCP's pumps). A context that is a transport.Expirer is
// told when a send's wait for a busy link passes its deadline.
//
// netmesh imports comm, comm/tier, internal/hoptrace, nexar/transport and
// nexar/internal/timerpool; never the runtime (package nexar).
package netmesh
