// Package launchenv turns a process's launch environment into a launch
// description: who this process is in the world, where the others can be
// found, and the job's secret. It reads hiercomm's own HIERCOMM_*
// variables and those of the launchers hiercomm runs under — torchrun (and
// torch's env:// rendezvous), Slurm's srun, a Kubernetes indexed Job behind
// a headless Service, and the local launcher (`hiercomm run`), whose
// children see torchrun's, Slurm's or Kubernetes' variables — and makes a
// Launch of them (LoadLaunch); a caller with explicit options builds the
// Launch itself. Launch.Resolve validates either and fills the defaults.
//
// It is a parser and does no I/O: the environment comes in as a getenv
// function (os.Getenv in programs, a map in tests), and the two things it
// may need of the operating system, the host name (when no host id is
// given) and the job key file (HIERCOMM_JOB_KEY_FILE), come in as
// functions too (Sys). It opens no socket, lists no interface and looks up
// no name; that is cluster's, which imports this package: cluster.Bind
// binds the sockets a resolved Launch names, the local launcher starts its
// children with the variables named here, and membership (cluster.Join)
// forms the world. The errors keep the "cluster:" prefix they had when
// this package was part of cluster, so hiercomm.Init's messages are the
// same.
//
// Files: launch.go is the Launch, its defaults and its validation
// (Resolve); env.go names every variable read and holds LoadLaunch, which
// picks the launcher style and applies hiercomm's own variables over it,
// and EnvError; styles.go reads each launcher's variables (torchrun,
// Slurm, Kubernetes, a lone process); hostlist.go expands Slurm's
// compressed host lists (ExpandHostList); ifspec.go parses and matches
// interface specs in NCCL_SOCKET_IFNAME syntax (IfSpec).
//
// launchenv imports the standard library only.
package launchenv
