// Package cluster finds out who is here: given a launch description (a
// launchenv.Launch, read from the environment by cluster/launchenv), it
// picks the network interface, binds the gossip and data sockets, and runs
// the membership protocol that turns independently started processes into
// one world with agreed ranks. It also holds the local launcher, which
// starts a job's processes on this host as a real launcher would.
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
// A job can grow while it runs: a process started with Config.Joining
// (HIERCOMM_JOIN=running) joins a formed world's gossip, is listed by
// Cluster.Waiting on every member, and its Join returns once the members
// Admit the grown world (topology.Topology.Grown), whose ranks failures
// are reported with from then on (grow.go).
//
// Reading the launch environment is cluster/launchenv's: a parser with no
// I/O of its own, apart from this package so that it can be table-tested
// and fuzzed without sockets. What touches the system stays here: the
// interfaces (SystemIfaces), the sockets, the inherited file descriptors
// and the processes of a local job.
//
// Files: bind.go binds a resolved launch's sockets (Bind) and ifname.go
// lists this machine's interfaces and selects an address by an IfSpec;
// local.go starts a job's processes on this host (hiercomm run),
// localjob.go controls them, fabric.go is the emulated network they may
// run in, and inherit.go takes the sockets a child inherits; sockets.go
// binds sockets; gossip.go is the memberlist transport over them; meta.go
// the metadata each member publishes and this process's record of the
// members. Join (join.go) forms the world: discover.go contacts the seeds,
// wait.go is the loop that waits for the world and reports progress,
// assign.go judges the members seen and assigns ranks; leave.go leaves it;
// grow.go admits processes into a running world.
// failure.go holds the failure detector's timings, leave notices and
// failure events; gossiplog.go memberlist's log; errors.go the errors of a
// failed join.
//
// cluster imports cluster/launchenv, topology and internal/procgroup (its
// local launcher) and nothing else of hiercomm — never nexar, shm, nccl or
// hierarchy: the root package wires membership events to the
// communicators.
package cluster
