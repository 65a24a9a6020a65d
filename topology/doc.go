// Package topology turns the members of a job — one descriptor per process,
// as each announces itself — into the shape the hierarchical communicator
// needs: nodes, local ranks, leads, rails, ring orders and the Split colors
// that carve the world communicator into its intra-node and inter-node
// parts.
//
// Everything here is a pure function of the member set: no I/O, no clock, no
// environment. New sorts its input, so every process that holds the same
// members, in any order, builds an identical Topology (and an identical JSON
// dump). A Topology is immutable and safe for concurrent use.
//
// A Topology can be dumped as JSON (MarshalJSON) and loaded back (Load), so
// a job's shape can be inspected, kept with its results, and replayed in
// tests; docs/topology.md describes the format.
//
// topology imports nothing of hiercomm, only the standard library: cluster
// (who is here) and hierarchy (the 2D communicator) import it.
package topology
