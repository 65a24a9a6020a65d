package launchenv

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"strconv"
	"strings"
	"time"
)

// Environment variables LoadLaunch reads. docs/environment.md describes
// each; a test checks that it lists every one.
const (
	// hiercomm's own; they override what a launcher style says.
	EnvJobID           = "HIERCOMM_JOB_ID"
	EnvJobKey          = "HIERCOMM_JOB_KEY"
	EnvJobKeyFile      = "HIERCOMM_JOB_KEY_FILE"
	EnvNetwork         = "HIERCOMM_NETWORK"
	EnvSocketIfname    = "HIERCOMM_SOCKET_IFNAME"
	EnvAddr            = "HIERCOMM_ADDR"
	EnvPort            = "HIERCOMM_PORT"
	EnvSeeds           = "HIERCOMM_SEEDS"
	EnvHostID          = "HIERCOMM_HOST_ID"
	EnvDevice          = "HIERCOMM_DEVICE"
	EnvJoinTimeout     = "HIERCOMM_JOIN_TIMEOUT"
	EnvTopoDumpFile    = "HIERCOMM_TOPO_DUMP_FILE"
	EnvIntra           = "HIERCOMM_INTRA"
	EnvNCCLLibrary     = "HIERCOMM_NCCL_LIBRARY"
	EnvCUDALibrary     = "HIERCOMM_CUDA_LIBRARY"
	EnvK8sService      = "HIERCOMM_K8S_SERVICE"
	EnvLauncherSockets = "HIERCOMM_LAUNCHER_SOCKETS"
	EnvHostProcs       = "HIERCOMM_HOST_PROCS"
	EnvConnsPerPeer    = "HIERCOMM_CONNS_PER_PEER"
	EnvNodeP2P         = "HIERCOMM_NODE_P2P"
	EnvJoin            = "HIERCOMM_JOIN"

	// NCCL's interface choice, read when HIERCOMM_SOCKET_IFNAME is unset.
	EnvNCCLSocketIfname = "NCCL_SOCKET_IFNAME"

	// torchrun (and torch's env:// rendezvous).
	EnvRank            = "RANK"
	EnvWorldSize       = "WORLD_SIZE"
	EnvLocalRank       = "LOCAL_RANK"
	EnvLocalWorldSize  = "LOCAL_WORLD_SIZE"
	EnvMasterAddr      = "MASTER_ADDR"
	EnvMasterPort      = "MASTER_PORT"
	EnvGroupRank       = "GROUP_RANK"
	EnvTorchAgentStore = "TORCHELASTIC_USE_AGENT_STORE"

	// Slurm (srun).
	EnvSlurmProcID       = "SLURM_PROCID"
	EnvSlurmNTasks       = "SLURM_NTASKS"
	EnvSlurmLocalID      = "SLURM_LOCALID"
	EnvSlurmNodeID       = "SLURM_NODEID"
	EnvSlurmStepNodeList = "SLURM_STEP_NODELIST"
	EnvSlurmJobNodeList  = "SLURM_JOB_NODELIST"
	EnvSlurmNodeList     = "SLURM_NODELIST"
	EnvSlurmdNodeName    = "SLURMD_NODENAME"
	EnvSlurmJobID        = "SLURM_JOB_ID"

	// Kubernetes indexed Job.
	EnvJobCompletionIndex = "JOB_COMPLETION_INDEX"
)

// EnvBind is read by the local launcher (cluster.StartLocal: `hiercomm
// run`, the bench), not by LoadLaunch: how it binds the processes it
// starts to this host's CPUs (cluster.LocalSpec.Bind).
const EnvBind = "HIERCOMM_BIND"

// envVars lists every variable LoadLaunch may read.
var envVars = []string{
	EnvJobID, EnvJobKey, EnvJobKeyFile, EnvNetwork, EnvSocketIfname, EnvAddr,
	EnvPort, EnvSeeds, EnvHostID, EnvDevice, EnvJoinTimeout, EnvTopoDumpFile, EnvIntra, EnvK8sService,
	EnvNCCLLibrary, EnvCUDALibrary,
	EnvLauncherSockets, EnvHostProcs, EnvConnsPerPeer, EnvNodeP2P, EnvJoin, EnvNCCLSocketIfname,
	EnvRank, EnvWorldSize, EnvLocalRank, EnvLocalWorldSize, EnvMasterAddr,
	EnvMasterPort, EnvGroupRank, EnvTorchAgentStore,
	EnvSlurmProcID, EnvSlurmNTasks, EnvSlurmLocalID, EnvSlurmNodeID,
	EnvSlurmStepNodeList, EnvSlurmJobNodeList, EnvSlurmNodeList,
	EnvSlurmdNodeName, EnvSlurmJobID,
	EnvJobCompletionIndex,
}

// EnvError is a launch-environment variable whose value, or absence,
// LoadLaunch cannot use.
type EnvError struct {
	Var   string // the variable at fault, e.g. "RANK"
	Value string // its value as read ("" when unset); never the job key
	// Reason is the whole explanation: it names Var and Value, what is
	// wrong and what to do.
	Reason string
}

func (e *EnvError) Error() string { return "cluster: launch environment: " + e.Reason }

// Sys is what LoadLaunch and Resolve ask of the operating system besides
// the environment variables: this package does no I/O of its own, so the
// caller hands it in (hiercomm.Init: os.Hostname and os.ReadFile; tests: a
// fixed name and their own files). A nil field counts as a host name that
// cannot be found, or a file that cannot be read.
type Sys struct {
	// Hostname returns the machine's host name (os.Hostname). It is asked
	// only when no host id is given (HIERCOMM_HOST_ID, a launcher's node).
	Hostname func() (string, error)
	// ReadFile returns a file's contents (os.ReadFile). It is asked only
	// for the file HIERCOMM_JOB_KEY_FILE names.
	ReadFile func(name string) ([]byte, error)
}

// env reads the environment for LoadLaunch and builds its errors. An empty
// value counts as unset: getenv cannot tell them apart.
type env struct {
	getenv func(string) string
	sys    Sys
}

func (e env) get(name string) string { return strings.TrimSpace(e.getenv(name)) }

func (e env) isSet(name string) bool { return e.get(name) != "" }

func (e env) errorf(name, format string, a ...any) error {
	return &EnvError{Var: name, Value: e.get(name), Reason: fmt.Sprintf(format, a...)}
}

// notSet reports a required variable that is missing; why says why it is
// needed and what to do.
func (e env) notSet(name, why string) error {
	return e.errorf(name, "%s is not set: %s", name, why)
}

// intVar parses name as a decimal integer in [lo, hi]; ok is false when it
// is unset. what names the range for the message, e.g. "[0, WORLD_SIZE=4)".
func (e env) intVar(name string, lo, hi int, what string) (v int, ok bool, err error) {
	s := e.get(name)
	if s == "" {
		return 0, false, nil
	}
	v, perr := strconv.Atoi(s)
	if perr != nil {
		return 0, true, e.errorf(name, "%s=%s is not an integer", name, s)
	}
	if v < lo || v > hi {
		return 0, true, e.errorf(name, "%s=%s is not in %s", name, s, what)
	}
	return v, true, nil
}

// portVar parses name as a TCP/UDP port (1 to 65535).
func (e env) portVar(name string) (port int, ok bool, err error) {
	s := e.get(name)
	if s == "" {
		return 0, false, nil
	}
	p, perr := strconv.Atoi(s)
	if perr != nil || p < 1 || p > 65535 {
		return 0, true, e.errorf(name, "%s=%s is not a port (1 to 65535)", name, s)
	}
	return p, true, nil
}

// hostVar checks that name holds an IP address or a host name, without a
// port.
func (e env) hostVar(name string) (string, error) {
	s := e.get(name)
	if s == "" || validHost(s) {
		return s, nil
	}
	if h, _, err := net.SplitHostPort(s); err == nil && validHost(h) {
		return "", e.errorf(name, "%s=%s has a port; give the host alone (ports are set apart: %s, or %s under torchrun)", name, s, EnvPort, EnvMasterPort)
	}
	return "", e.errorf(name, "%s=%s is not an IP address or host name", name, s)
}

// LoadLaunch reads the launch environment through getenv (os.Getenv in
// programs, a map in tests). It is the one place in hiercomm that reads
// environment variables; docs/environment.md lists them all.
//
// The style is chosen by precedence: HIERCOMM_K8S_SERVICE (kubernetes),
// then RANK (torchrun; a torchrun started under srun sets RANK for its
// workers, so it wins over Slurm), then SLURM_PROCID (slurm), then WORLD_SIZE
// alone (torchrun, which then reports the missing RANK); with none of them
// the world is this process alone (single). hiercomm's own HIERCOMM_*
// variables override what the style says.
//
// Besides getenv, LoadLaunch reads the file HIERCOMM_JOB_KEY_FILE names
// and, when no host id is given, the host name, through sys; it does no
// I/O of its own. Every value it reads is checked: an error is an
// *EnvError naming the variable, its value and what to do.
// Checks that need the whole Launch (a key for a world of more than one,
// seeds) are Resolve's, so a caller may still fill those fields from its
// own options; the returned Launch is not resolved.
func LoadLaunch(getenv func(string) string, sys Sys) (Launch, error) {
	e := env{getenv: getenv, sys: sys}
	l := Launch{Device: -1}

	// The seed gossip port: HIERCOMM_PORT, else the style's.
	port, portSet, err := e.portVar(EnvPort)
	if err != nil {
		return Launch{}, err
	}
	if !portSet {
		port = DefaultPort
	}

	switch {
	case e.isSet(EnvK8sService):
		err = e.kubernetes(&l, port)
	case e.isSet(EnvRank), !e.isSet(EnvSlurmProcID) && e.isSet(EnvWorldSize):
		err = e.torchrun(&l, port, portSet)
	case e.isSet(EnvSlurmProcID):
		err = e.slurm(&l, port)
	default:
		err = e.single(&l)
	}
	if err != nil {
		return Launch{}, err
	}
	if err := e.own(&l); err != nil {
		return Launch{}, err
	}
	if l.Host == "" {
		h, err := lookupHostname(sys.Hostname)
		if err != nil {
			return Launch{}, &EnvError{Var: EnvHostID, Reason: fmt.Sprintf("%s is not set and %v: set %s to a name that is the same for every process of this node", EnvHostID, err, EnvHostID)}
		}
		l.Host = h
	}
	return l, nil
}

// own applies hiercomm's variables, which override the style's values.
func (e env) own(l *Launch) error {
	if id := e.get(EnvJobID); id != "" {
		if !validJobID(id) {
			return e.errorf(EnvJobID, "%s=%s: use 1 to 128 letters, digits, '.', '_', '-' or '~' (the id is bound into certificates)", EnvJobID, id)
		}
		l.JobID = id
	}
	if err := e.key(l); err != nil {
		return err
	}
	if n := e.get(EnvNetwork); n != "" {
		if !KnownNetwork(n) {
			return e.errorf(EnvNetwork, "%s=%s: use %s", EnvNetwork, n, NetworkNames)
		}
		l.Network = n
	}
	for _, name := range []string{EnvSocketIfname, EnvNCCLSocketIfname} {
		if s := e.get(name); s != "" {
			if _, err := ParseIfSpec(s); err != nil {
				return e.errorf(name, "%s=%s: %v", name, s, err)
			}
			l.IfSpec, l.ifVar = s, name
			break
		}
	}
	addr, err := e.hostVar(EnvAddr)
	if err != nil {
		return err
	}
	l.Addr = addr
	if s := e.get(EnvSeeds); s != "" {
		seeds, err := parseSeeds(s)
		if err != nil {
			return e.errorf(EnvSeeds, "%s=%s: %v", EnvSeeds, s, err)
		}
		l.Seeds = seeds
	}
	if h := e.get(EnvHostID); h != "" {
		l.Host = h
	}
	if d, ok, err := e.intVar(EnvDevice, -1, 1<<20, "[-1, 2^20] (-1: no accelerator)"); err != nil {
		return err
	} else if ok {
		l.Device = d
	}
	l.TopoDumpFile = e.get(EnvTopoDumpFile)
	l.NCCLLibrary, l.CUDALibrary = e.get(EnvNCCLLibrary), e.get(EnvCUDALibrary)
	switch v := e.get(EnvIntra); v {
	case "", "auto", "shm", "nexar", "nccl":
		l.Intra = v
	default:
		return e.errorf(EnvIntra, "%s=%s: use auto (the default: NCCL where the process sees a GPU, else shared memory between the ranks of a node), nccl, shm or nexar", EnvIntra, v)
	}
	switch v := e.get(EnvNodeP2P); v {
	case "", "auto", "intra", "world":
		l.NodeP2P = v
	default:
		return e.errorf(EnvNodeP2P, "%s=%s: use auto (the default on hosts: Send and Recv between ranks of one node through the network transport where more processes than cores share a host, else through the node's communicator), intra (through the node's communicator) or world (through the network transport)", EnvNodeP2P, v)
	}
	switch v := e.get(EnvJoin); v {
	case "":
	case "running":
		l.Joining = true
	default:
		return e.errorf(EnvJoin, "%s=%s: use running (this process joins a job that is already running, as a replacement or an addition: it waits until the members Grow) or leave it unset", EnvJoin, v)
	}
	if s := e.get(EnvJoinTimeout); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return e.errorf(EnvJoinTimeout, "%s=%s is not a positive Go duration such as 90s or 5m", EnvJoinTimeout, s)
		}
		l.JoinTimeout = d
	}
	if n, ok, err := e.intVar(EnvHostProcs, 1, 1<<20, "[1, 2^20]"); err != nil {
		return err
	} else if ok {
		l.HostProcs = n
	}
	if n, ok, err := e.intVar(EnvConnsPerPeer, 1, MaxConnsPerPeer, fmt.Sprintf("[1, %d]", MaxConnsPerPeer)); err != nil {
		return err
	} else if ok {
		l.ConnsPerPeer = n
	}
	switch s := e.get(EnvLauncherSockets); s {
	case "", "0":
	case "1":
		l.Inherited = true
	default:
		return e.errorf(EnvLauncherSockets, "%s=%s: only `hiercomm run` sets it, to 1; unset it", EnvLauncherSockets, s)
	}
	return nil
}

// key reads the job key from HIERCOMM_JOB_KEY or HIERCOMM_JOB_KEY_FILE.
// Errors never carry the key: not in the message, not in EnvError.Value.
func (e env) key(l *Launch) error {
	// The key is used byte for byte, not trimmed like other values.
	k, file := e.getenv(EnvJobKey), e.get(EnvJobKeyFile)
	keyErr := func(name, format string, a ...any) error {
		v := ""
		if name == EnvJobKeyFile {
			v = file
		}
		return &EnvError{Var: name, Value: v, Reason: fmt.Sprintf(format, a...)}
	}
	howTo := fmt.Sprintf("make one with `export %s=$(openssl rand -hex 32)`", EnvJobKey)
	if k != "" && file != "" {
		return keyErr(EnvJobKey, "both %s and %s=%s are set; set only one", EnvJobKey, EnvJobKeyFile, file)
	}
	if file == "" {
		if k != "" && len(k) < MinKeyLen {
			return keyErr(EnvJobKey, "%s has %d bytes, need at least %d; %s", EnvJobKey, len(k), MinKeyLen, howTo)
		}
		if k != "" {
			l.Key = []byte(k)
		}
		return nil
	}
	readFile := e.sys.ReadFile
	if readFile == nil {
		readFile = func(string) ([]byte, error) { return nil, errors.New("no ReadFile function was given") }
	}
	b, err := readFile(file)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return keyErr(EnvJobKeyFile, "%s=%s cannot be read: %v; every process needs the same key file (make one with `openssl rand -hex 32 > %s`)", EnvJobKeyFile, file, err, file)
	}
	// One trailing newline, as echo and editors leave, is not part of the key.
	k = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if len(k) < MinKeyLen {
		return keyErr(EnvJobKeyFile, "%s=%s holds a key of %d bytes, need at least %d; make one with `openssl rand -hex 32 > %s`", EnvJobKeyFile, file, len(k), MinKeyLen, file)
	}
	l.Key = []byte(k)
	return nil
}

// parseSeeds parses a comma-separated list of host:port.
func parseSeeds(s string) ([]string, error) {
	var seeds []string
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if err := checkSeed(item); err != nil {
			return nil, err
		}
		seeds = append(seeds, item)
	}
	return seeds, nil
}
