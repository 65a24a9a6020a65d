package launchenv

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Launch is what the launch environment says about this process: who it is
// in the world, where the others can be found, and the job's secret.
// LoadLaunch fills one from the environment; a caller with explicit options
// builds one itself (Style "explicit") or overrides fields of the loaded one.
// Either way, Resolve validates it and fills the defaults before use; a
// Launch is a plain value and Resolve returns a copy. cluster.Bind binds
// the sockets a resolved Launch names.
type Launch struct {
	// Style says where the values came from: StyleExplicit, StyleTorchrun,
	// StyleSlurm, StyleKubernetes, StyleLocal or StyleSingle. If empty,
	// Resolve sets StyleExplicit.
	Style string
	// Rank is this process's global rank, in [0, WorldSize), or -1 to let
	// membership assign ranks (every process of the world must then use -1).
	// The zero value is rank 0.
	Rank int
	// WorldSize is the number of processes in the job; at least 1. There is
	// no default: zero is an error.
	WorldSize int
	// LocalRank is this process's index among the processes of its host,
	// >= 0. Processes of one host must use 0, 1, ... without gaps.
	LocalRank int
	// Host identifies the node: processes with the same Host are on the same
	// machine and talk through the intra-node path. If empty, Resolve uses
	// the machine's host name.
	Host string
	// Device is the accelerator ordinal this process drives, or -1 for none.
	// The zero value is device 0; LoadLaunch sets -1 unless HIERCOMM_DEVICE
	// is set.
	Device int
	// Seeds are the gossip addresses (host:port) a process contacts to
	// join. A host may be a DNS name with several addresses (a Kubernetes
	// headless Service); each is tried. The list may name this process
	// itself. Required when WorldSize > 1.
	Seeds []string
	// Addr is the IP address or host name this process binds and
	// advertises (no port). If empty, the caller chooses one with IfSpec
	// (see IfaceSpec and cluster.SelectAddr).
	Addr string
	// IfSpec chooses the network interface when Addr is empty, in
	// NCCL_SOCKET_IFNAME syntax (see ParseIfSpec). If empty, the default
	// choice: any interface but docker* and lo*, else loopback.
	IfSpec string
	// GossipPort is the port this process binds for gossip: the seed
	// process(es) bind the port the Seeds name, the others 0. If zero, the
	// kernel picks a free port. Resolve sets it to 0 for a world of 1,
	// which needs no seed.
	GossipPort int
	// JobID names the job; it is bound into the gossip encryption and the
	// data-plane certificates, so jobs sharing a key still never mix. 1 to
	// 128 letters, digits, '.', '_', '-' or '~'. If empty, defaults to
	// DefaultJobID.
	JobID string
	// Key is the secret every process of the job shares, at least
	// MinKeyLen bytes. Required when WorldSize > 1.
	Key []byte
	// Network is the data-plane transport: "quic" (encrypted: QUIC, with
	// a TLS 1.3 lane over TCP on the same port for large frames),
	// "quic-only" (QUIC alone, for networks that pass only UDP) or "tcp"
	// (authenticated, not encrypted; for trusted fabrics). If empty,
	// defaults to "quic".
	Network string
	// JoinTimeout bounds the whole join, until every process of the world
	// is present. If zero, defaults to DefaultJoinTimeout.
	JoinTimeout time.Duration
	// Joining reports that this process joins a job that is already
	// running (HIERCOMM_JOIN=running), a replacement for a failed process
	// or an addition: instead of forming a world of WorldSize, it joins
	// the running members' membership and waits, at most JoinTimeout,
	// until they Grow and admit it (hiercomm.World.Grow). Its rank and
	// the world's size are the grown world's.
	Joining bool
	// Inherited reports that the sockets were bound by the parent (the local
	// launcher, `hiercomm run`) and are open in this process as file
	// descriptors 3 (gossip TCP), 4 (gossip UDP), 5 (data) and, for
	// network quic, 6 (its TLS lane's TCP listener); the caller
	// takes them with cluster.LauncherSockets instead of binding. GossipPort
	// is then informational.
	Inherited bool
	// Intra chooses the communicator between the ranks of one node: "nccl"
	// (NCCL on device memory; device data crosses nodes through page-locked
	// host memory), "shm" (shared memory), "nexar" (the network transport,
	// as between nodes) or "" / "auto" (NCCL when the GPU tier is available
	// and the process sees a GPU, else shared memory when a node has
	// several ranks). Resolve refuses anything else.
	Intra string
	// NodeP2P chooses how Send and Recv between two ranks of one node of
	// a hierarchical world go: "intra" (through Intra's communicator),
	// "world" (through the network transport, as between nodes:
	// hierarchy.Config.NodeP2PViaWorld) or "auto" (the world's where more
	// processes than cores share a host, else the intra part's:
	// hierarchy.Config.NodeP2PViaWorldWhenCrowded); "" is auto on the host
	// tier and intra on the GPU tier (NCCL's route; the world's would
	// stage every message through host memory). HIERCOMM_NODE_P2P. Every
	// rank of the job must use the same.
	NodeP2P string
	// HostProcs is how many processes of jobs started together share this
	// host's cores (the local launchers set HIERCOMM_HOST_PROCS: every
	// rank of an emulated cluster runs on one host). If zero, a rank
	// counts the ranks of its own node. The hierarchy's cost model uses
	// it to know how crowded the cores are.
	HostProcs int
	// ConnsPerPeer is how many data connections each rank opens to each
	// other rank (nexar.NetConfig.ConnsPerPeer; HIERCOMM_CONNS_PER_PEER):
	// frames to a peer are spread over them, so a link's traffic can use
	// several cores where a node has them idle. Every rank of the job must
	// use the same value. If zero, the transport's default (1); at most
	// MaxConnsPerPeer.
	ConnsPerPeer int
	// NCCLLibrary and CUDALibrary are the libnccl.so.2 and the CUDA driver
	// library (libcuda.so.1) the GPU tier loads (nccl.LoadOptions' NCCLPath
	// and CUDAPath). If empty, the GPU tier searches for them.
	NCCLLibrary, CUDALibrary string
	// TopoDumpFile, if set, is where rank 0 writes the job's topology as
	// JSON once the world is formed (NCCL_TOPO_DUMP_FILE's counterpart);
	// `hiercomm topology FILE` prints it.
	TopoDumpFile string

	// ifVar is the variable IfSpec was read from, for error messages.
	ifVar string
}

// Launch styles: Launch.Style values.
const (
	// StyleExplicit: the caller filled the Launch itself.
	StyleExplicit = "explicit"
	// StyleTorchrun: RANK, WORLD_SIZE, ... as torchrun (and torch's env://)
	// set them.
	StyleTorchrun = "torchrun"
	// StyleSlurm: SLURM_PROCID, SLURM_NTASKS, ... as srun sets them.
	StyleSlurm = "slurm"
	// StyleKubernetes: HIERCOMM_K8S_SERVICE names a headless Service whose
	// pods are the job's processes.
	StyleKubernetes = "kubernetes"
	// StyleLocal is for a Launch the local launcher builds itself. A child
	// of `hiercomm run` reads its launcher's torchrun or Slurm variables, so
	// LoadLaunch reports StyleTorchrun or StyleSlurm with Inherited set.
	StyleLocal = "local"
	// StyleSingle: no launcher found; a world of one process.
	StyleSingle = "single"
)

// NetworkNames lists the data-plane networks (Launch.Network), for
// messages.
const NetworkNames = "quic (encrypted, the default: QUIC and a TLS lane over TCP on the same port), quic-only (QUIC alone: only UDP) or tcp (trusted fabrics)"

// KnownNetwork reports whether n names a data-plane network: quic,
// quic-only or tcp.
func KnownNetwork(n string) bool { return n == "quic" || n == "quic-only" || n == "tcp" }

// Defaults and limits of Launch.
const (
	DefaultJobID   = "hiercomm"
	DefaultNetwork = "quic"
	// MaxConnsPerPeer is the most connections to each peer a launch may
	// ask for (nexar's own limit).
	MaxConnsPerPeer    = 64
	DefaultJoinTimeout = 2 * time.Minute
	// DefaultPort is the seed gossip port when neither HIERCOMM_PORT nor
	// the launcher (MASTER_PORT) gives one; torchrun's default too.
	DefaultPort = 29500
	// MinKeyLen is the shortest job key accepted, in bytes.
	MinKeyLen = 16
)

// lookupHostname asks hostname (Sys.Hostname, os.Hostname in programs)
// for the host name, and returns it or an error that says it is missing.
func lookupHostname(hostname func() (string, error)) (string, error) {
	if hostname == nil {
		return "", errors.New("the host name cannot be found (no Hostname function was given)")
	}
	h, err := hostname()
	switch {
	case err != nil:
		return "", fmt.Errorf("the host name cannot be found (%v)", err)
	case h == "":
		return "", errors.New("the host name is empty")
	}
	return h, nil
}

// checkSeed checks one host:port.
func checkSeed(s string) error {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("seed %q is not host:port", s)
	}
	if !validHost(h) {
		return fmt.Errorf("seed %q: %q is not an IP address or host name", s, h)
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("seed %q: %q is not a port (1 to 65535)", s, p)
	}
	return nil
}

// validHost reports whether s is an IP address or a syntactically valid
// host name (letters, digits, '-', '_' and dots between labels).
func validHost(s string) bool {
	if net.ParseIP(s) != nil {
		return true
	}
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// validJobID reports whether id may be a job id: 1 to 128 of
// [A-Za-z0-9._~-] (nexar binds it into certificates).
func validJobID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range []byte(id) {
		if !jobIDByte(c) {
			return false
		}
	}
	return true
}

func jobIDByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' || c == '~'
}

// sanitizeJobID turns a launcher's job id into a valid one: other bytes
// become '-', and it is cut to 128 bytes.
func sanitizeJobID(id string) string {
	b := []byte(id)
	for i, c := range b {
		if !jobIDByte(c) {
			b[i] = '-'
		}
	}
	if len(b) > 128 {
		b = b[:128]
	}
	return string(b)
}

// IfaceSpec parses l.IfSpec. The result's Source names the variable it was
// read from (HIERCOMM_SOCKET_IFNAME or NCCL_SOCKET_IFNAME; the former when
// neither was set), or "IfSpec" for an explicit Launch, so
// cluster.SelectAddr's errors point at the setting to change.
func (l Launch) IfaceSpec() (IfSpec, error) {
	s, err := ParseIfSpec(l.IfSpec)
	if err != nil {
		return IfSpec{}, err
	}
	switch {
	case l.ifVar != "":
		s.Source = l.ifVar
	case l.Style == "" || l.Style == StyleExplicit:
		s.Source = "IfSpec"
	default:
		s.Source = EnvSocketIfname
	}
	return s, nil
}

// Resolve returns a copy of l, validated, with the defaults its fields
// document filled in. It does no I/O: when Host is empty it asks hostname
// (os.Hostname in programs; nil counts as a host name that cannot be
// found). Errors name the field, its value and what to do.
func (l Launch) Resolve(hostname func() (string, error)) (Launch, error) {
	bad := func(format string, a ...any) (Launch, error) {
		return Launch{}, fmt.Errorf("cluster: invalid Launch: "+format, a...)
	}
	switch l.Style {
	case "":
		l.Style = StyleExplicit
	case StyleExplicit, StyleTorchrun, StyleSlurm, StyleKubernetes, StyleLocal, StyleSingle:
	default:
		return bad("Style %q is not one of explicit, torchrun, slurm, kubernetes, local, single", l.Style)
	}
	if l.WorldSize < 1 {
		return bad("WorldSize %d: a world has at least 1 process", l.WorldSize)
	}
	if l.Rank < -1 || l.Rank >= l.WorldSize {
		return bad("Rank %d is not in [-1, WorldSize %d) (-1: membership assigns ranks)", l.Rank, l.WorldSize)
	}
	if l.LocalRank < 0 || l.LocalRank >= l.WorldSize {
		return bad("LocalRank %d is not in [0, WorldSize %d)", l.LocalRank, l.WorldSize)
	}
	if l.Device < -1 {
		return bad("Device %d: use an accelerator ordinal >= 0, or -1 for none", l.Device)
	}
	if l.Host == "" {
		h, err := lookupHostname(hostname)
		if err != nil {
			return bad("Host is empty and %v: set Host (or %s) to a name that is the same for every process of this node", err, EnvHostID)
		}
		l.Host = h
	}
	for i, s := range l.Seeds {
		if err := checkSeed(s); err != nil {
			return bad("Seeds[%d]: %v", i, err)
		}
	}
	if l.WorldSize > 1 && len(l.Seeds) == 0 {
		return bad("Seeds is empty: a world of %d needs at least one gossip seed (host:port) to join; launchers give one (MASTER_ADDR, the Slurm node list, %s), or set %s", l.WorldSize, EnvK8sService, EnvSeeds)
	}
	if l.Addr != "" && !validHost(l.Addr) {
		return bad("Addr %q is not an IP address or host name (give no port)", l.Addr)
	}
	if _, err := ParseIfSpec(l.IfSpec); err != nil {
		return bad("IfSpec %q: %v", l.IfSpec, err)
	}
	if l.GossipPort < 0 || l.GossipPort > 65535 {
		return bad("GossipPort %d is not in [0, 65535] (0: the kernel picks)", l.GossipPort)
	}
	if l.WorldSize == 1 {
		// Nobody looks for a world of one: no fixed port to collide on.
		l.GossipPort = 0
	}
	if l.JobID == "" {
		l.JobID = DefaultJobID
	}
	if !validJobID(l.JobID) {
		return bad("JobID %q: use 1 to 128 letters, digits, '.', '_', '-' or '~' (it is bound into certificates)", l.JobID)
	}
	switch {
	case len(l.Key) == 0 && l.WorldSize > 1:
		return bad("no job key: a world of %d needs a secret shared by every process, at least %d bytes; make one with `export %s=$(openssl rand -hex 32)` (or write it to a file named by %s) before launching", l.WorldSize, MinKeyLen, EnvJobKey, EnvJobKeyFile)
	case len(l.Key) > 0 && len(l.Key) < MinKeyLen:
		return bad("Key has %d bytes, need at least %d; make one with `export %s=$(openssl rand -hex 32)`", len(l.Key), MinKeyLen, EnvJobKey)
	}
	switch l.Network {
	case "":
		l.Network = DefaultNetwork
	default:
		if !KnownNetwork(l.Network) {
			return bad("Network %q: use %s", l.Network, NetworkNames)
		}
	}
	switch l.Intra {
	case "":
		l.Intra = "auto"
	case "auto", "shm", "nexar", "nccl":
	default:
		return bad("Intra %q: use auto (the default: NCCL where the process sees a GPU, else shared memory between the ranks of a node), nccl, shm or nexar", l.Intra)
	}
	switch l.NodeP2P {
	case "", "auto", "intra", "world":
	default:
		return bad("NodeP2P %q: use auto (the default on hosts: through the network transport where more processes than cores share a host, else through the node's communicator), intra (through the node's communicator) or world (through the network transport)", l.NodeP2P)
	}
	if l.ConnsPerPeer < 0 || l.ConnsPerPeer > MaxConnsPerPeer {
		return bad("ConnsPerPeer %d: use 1 to %d (0: the transport's default, 1)", l.ConnsPerPeer, MaxConnsPerPeer)
	}
	if l.JoinTimeout < 0 {
		return bad("JoinTimeout %v is negative", l.JoinTimeout)
	}
	if l.JoinTimeout == 0 {
		l.JoinTimeout = DefaultJoinTimeout
	}
	l.Seeds = slices.Clone(l.Seeds)
	l.Key = slices.Clone(l.Key)
	return l, nil
}
