// Package cluster finds out who is here: it reads the launch environment
// (flags, torchrun, Slurm, Kubernetes, the local launcher), picks the
// network interface, binds the gossip and data sockets, and runs the
// membership protocol that turns independently started processes into one
// world with agreed ranks.
//
// Membership is memberlist (SWIM) over sockets the caller bound: gossip is
// encrypted and authenticated with a key derived from the job key and the
// job id, so processes of another job, or without the key, can neither join
// nor read anything. Each member publishes its job id, host id, local index,
// device and data-plane address; Join waits, with a bounded timeout and
// progress in the log ("7/16 ranks joined"), until the expected world size
// is present, and then every member computes the same rank assignment with
// topology.New. After the world has formed, memberlist's failure detector
// raises a Failure for every member declared dead, on every survivor,
// within Detector.Bound; a member that leaves gracefully gossips a leave
// notice first, so that its departure is not taken for a death.
//
// Files: launch.go, ifname.go and hostlist.go read the environment, select
// interfaces and expand Slurm host lists; local.go starts a job's processes
// on this host (hiercomm run); sockets.go binds sockets; gossip.go is the
// memberlist transport over them; meta.go the metadata each member
// publishes and this process's record of the members; join.go forms the
// world; failure.go the failure detector's timings, leave notices and
// failure events; errors.go the errors of a failed join.
//
// cluster imports topology and nothing else of hiercomm — never nexar, shm,
// nccl or hierarchy: the root package wires membership events to the
// communicators.
package cluster
