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
// notice of its own beside memberlist's leave message, so that its
// departure is not taken for a death.
//
// Files: launch.go is the Launch (who this process is) and its
// validation; env.go and styles.go read it from the environment (hiercomm's
// own variables, torchrun, Slurm, Kubernetes), ifname.go and hostlist.go
// select interfaces and expand Slurm host lists; local.go starts a job's
// processes on this host (hiercomm run), localjob.go controls them and
// inherit.go takes the sockets a child inherits; sockets.go binds sockets;
// gossip.go is the memberlist transport over them; meta.go the metadata
// each member publishes and this process's record of the members. Join
// (join.go) forms the world: discover.go contacts the seeds, wait.go is the
// loop that waits for the world and reports progress, assign.go judges the
// members seen and assigns ranks; leave.go leaves it. failure.go holds the
// failure detector's timings, leave notices and failure events; errors.go
// the errors of a failed join.
//
// cluster imports topology and internal/procgroup (its local launcher)
// and nothing else of hiercomm — never nexar, shm, nccl or hierarchy: the root package wires membership events to the
// communicators.
package cluster
